"""Token datasets and the per-rank micro-batch stream (DistributedSampler's order over the
data-parallel group, drawn on demand: a rank holds one micro-batch of tokens at a time, however
many steps and ranks the trial has)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch
from torch.utils.data import Dataset

from launcher.config.schema import DataConfig, ModelConfig

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
    if data.kind == "file":
        return FileTokens(data.path, data.dtype, model.seq_len)  # type: ignore[arg-type]
    return SyntheticTokens(num_samples, model.seq_len, model.vocab_size, seed)


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

    def __iter__(self) -> "MicroBatches":
        return self

    def __next__(self) -> torch.Tensor:
        if self.taken == self.per_epoch:
            self.epoch, self.taken = self.epoch + 1, 0
            self.order = self._rank_order(self.epoch)
        rows = self.order[self.taken * self.micro : (self.taken + 1) * self.micro].tolist()
        self.taken += 1
        return torch.stack([self.dataset[i] for i in rows])
