"""Datasets and the per-rank micro-batch stream (DistributedSampler's order over the
data-parallel group, drawn on demand: a rank holds one micro-batch at a time, however many
steps and ranks the trial has).

Datasets: synthetic token rows (built-in models) or samples of model.inputs (`_target_` models,
models/byo.py), a token file, or the user's own (data=dataset data._target_=mypkg.data.make);
a micro-batch is the items collated (token rows stacked, dict items key by key)."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch.utils.data import Dataset, default_collate

from launcher.config.schema import DataConfig, ModelConfig
from launcher.train.models.byo import TARGET_KEY, SyntheticInputs
from launcher.train.models.target import instantiate

NOISE = 0.1
"""Fraction of synthetic positions replaced by uniform noise."""


def sample_seed(seed: int, index: int) -> int:
    """The generator seed of synthetic sample `index` under `seed`."""
    return (seed * 1_000_003 + index * 2_654_435_761 + 1) % (1 << 63)


class SyntheticTokens(Dataset):
    """Seeded sequences with a learnable rule: token[t+1] = token[t] + stride (mod vocab), with
    10% of positions replaced by noise. Sample i is generated when asked for, from (seed, i)
    alone, so every layout and rank count sees the same data and nothing is held in memory."""

    def __init__(self, num_samples: int, seq_len: int, vocab_size: int, seed: int) -> None:
        self.num_samples, self.seq_len, self.vocab_size, self.seed = num_samples, seq_len, vocab_size, seed

    def __len__(self) -> int:
        return self.num_samples

    def __getitem__(self, i: int) -> torch.Tensor:
        if not 0 <= i < self.num_samples:
            raise IndexError(f"sample {i} is outside 0..{self.num_samples - 1}")
        g = torch.Generator().manual_seed(sample_seed(self.seed, i))
        start = torch.randint(0, self.vocab_size, (1,), generator=g)
        stride = torch.randint(1, 8, (1,), generator=g)
        tokens = (start + stride * torch.arange(self.seq_len + 1)) % self.vocab_size
        noise = torch.rand(self.seq_len + 1, generator=g) < NOISE
        tokens[noise] = torch.randint(0, self.vocab_size, (int(noise.sum()),), generator=g)
        return tokens


class FileTokens(Dataset):
    """Non-overlapping windows of seq_len+1 tokens from a flat binary token file (memory-mapped)."""

    def __init__(self, path: str | Path, dtype: str, seq_len: int) -> None:
        self.tokens = np.memmap(path, dtype=np.dtype(dtype).newbyteorder("<"), mode="r")
        self.seq_len = seq_len

    def __len__(self) -> int:
        return (len(self.tokens) - 1) // self.seq_len

    def __getitem__(self, i: int) -> torch.Tensor:
        start = i * self.seq_len
        return torch.from_numpy(self.tokens[start : start + self.seq_len + 1].astype(np.int64))


def build_dataset(data: DataConfig, model: ModelConfig, num_samples: int, seed: int) -> Dataset:
    """This trial's samples: `num_samples` synthetic ones (steps × global batch), or the file's
    or the user's dataset as it is (epochs wrap around)."""
    if data.kind == "dataset":
        return user_dataset(data, model)
    if model._target_ is not None and data.kind == "synthetic":  # a `_target_` model: its model.inputs
        return SyntheticInputs(model, num_samples, lambda i: sample_seed(seed, i))
    if data.kind == "file":
        return FileTokens(data.path, data.dtype, model.seq_len)  # type: ignore[arg-type]
    return SyntheticTokens(num_samples, model.seq_len, model.vocab_size, seed)


def item_names(model: ModelConfig) -> list[str] | None:
    """The keys of a `_target_` model's samples, in order: model.inputs' names, then `target`
    where the model has a model.target; None for a built-in model (its samples are token rows)."""
    if model._target_ is None:
        return None
    return [*model.inputs, *([TARGET_KEY] if model.target is not None else [])]


def user_dataset(data: DataConfig, model: ModelConfig) -> Dataset:
    """data._target_(**data.kwargs), checked on its first item, its items as dicts (`Keyed`)."""
    built = instantiate({"_target_": data._target_, **data.kwargs}, key="data._target_")
    if not (hasattr(built, "__getitem__") and hasattr(built, "__len__")):
        raise TypeError(
            f"data._target_={data._target_} returned {type(built).__name__}, not a map-style Dataset; "
            "return an object with __len__ and __getitem__ (a torch.utils.data.Dataset)"
        )
    if len(built) == 0:
        raise ValueError(f"data._target_={data._target_} returned an empty dataset (len 0); give it samples")
    keyed = Keyed(built, item_names(model), data._target_)  # type: ignore[arg-type]
    first = keyed[0]  # a wrong item fails here, at start-up, saying what it should be
    row = (model.seq_len + 1,)
    if model._target_ is None and not (isinstance(first, torch.Tensor) and tuple(first.shape) == row):
        got = tuple(first.shape) if isinstance(first, torch.Tensor) else type(first).__name__
        raise ValueError(
            f"data._target_={data._target_}: item 0 is {got}, but model={model.name} takes rows of "
            f"model.seq_len+1={row[0]} token ids; return such a tensor per item"
        )
    return keyed


class Keyed(Dataset):
    """A user's dataset whose items reach the model as dicts: a dict item as it is, a tuple or
    list item keyed by `names` in order (inputs, then the target: an (image, label) pair with
    inputs {image} and a target becomes {image: …, target: …}), a lone tensor where there is one
    name. A built-in model (`names` None) takes a row of seq_len+1 token ids per item."""

    def __init__(self, dataset: Dataset, names: list[str] | None, source: str) -> None:
        self.dataset, self.names, self.source = dataset, names, source

    def __len__(self) -> int:
        return len(self.dataset)  # type: ignore[arg-type]

    def __getitem__(self, i: int) -> Any:
        item = self.dataset[i]
        if self.names is None:
            return item
        if isinstance(item, (tuple, list)) and len(item) == len(self.names):
            item = dict(zip(self.names, item))
        elif isinstance(item, torch.Tensor) and len(self.names) == 1:
            item = {self.names[0]: item}
        if not isinstance(item, Mapping) or sorted(item) != sorted(self.names):
            got = sorted(item) if isinstance(item, Mapping) else f"a {type(item).__name__} of {_length(item)}"
            raise ValueError(
                f"data._target_={self.source}: item {i} is {got}, but the model takes {self.names}; "
                f"return a dict with those keys, or a tuple of {len(self.names)} in that order"
            )
        return item


def _length(item: Any) -> str:
    return f"{len(item)} entries" if isinstance(item, (tuple, list)) else "one value"


class MicroBatches:
    """Endless iterator of this rank's micro-batches, in exactly the order DistributedSampler
    (shuffle, drop_last, seed + epoch) and a DataLoader(batch_size=micro, drop_last) would give:
    rank r of dp takes permutation[r::dp], so the union over ranks of each step equals what one
    process with the whole global batch would take — the property the parity tests rely on.
    Only this rank's sample indices are kept; each micro-batch's tokens are read (synthetic:
    generated) when it is due."""

    def __init__(self, dataset: Dataset, micro: int, dp: int, rank: int, seed: int) -> None:
        n = len(dataset)  # type: ignore[arg-type]
        if n < micro * dp:
            raise ValueError(f"dataset has {n} samples, fewer than one step's micro({micro}) × dp({dp})")
        self.dataset, self.micro, self.dp, self.rank, self.seed = dataset, micro, dp, rank, seed
        self.per_epoch = (n // dp) // micro  # micro-batches per epoch on each rank
        self.epoch, self.taken = 0, 0
        self.order = self._rank_order(0)

    def _rank_order(self, epoch: int) -> torch.Tensor:
        """This rank's sample indices for `epoch` (DistributedSampler's, as a tensor, not a list)."""
        n = len(self.dataset)  # type: ignore[arg-type]
        total = (n // self.dp) * self.dp
        g = torch.Generator().manual_seed(self.seed + epoch)
        return torch.randperm(n, generator=g)[self.rank : total : self.dp].clone()

    def skip(self, count: int) -> None:
        """Move on `count` micro-batches without reading them (a resumed run: the same samples
        from there on as an uninterrupted run's, however costly the user's items are to load)."""
        taken = self.taken + count
        epoch = self.epoch + taken // self.per_epoch
        self.taken = taken % self.per_epoch
        if epoch != self.epoch:
            self.epoch, self.order = epoch, self._rank_order(epoch)

    def __iter__(self) -> MicroBatches:
        return self

    def __next__(self) -> torch.Tensor:
        if self.taken == self.per_epoch:
            self.epoch, self.taken = self.epoch + 1, 0
            self.order = self._rank_order(self.epoch)
        rows = self.order[self.taken * self.micro : (self.taken + 1) * self.micro].tolist()
        self.taken += 1
        return default_collate([self.dataset[i] for i in rows])  # token rows stacked; dict samples key by key
