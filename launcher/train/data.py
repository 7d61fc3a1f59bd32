"""Token datasets and the per-rank loader (DistributedSampler over the data-parallel group)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch
from torch.utils.data import DataLoader, Dataset, DistributedSampler

from launcher.config.schema import DataConfig, ModelConfig


class SyntheticTokens(Dataset):
    """Seeded sequences with a learnable rule: token[t+1] = token[t] + stride (mod vocab), with
    10% of positions replaced by noise. Sample i depends only on (seed, i), so every layout and
    rank count sees the same data."""

    def __init__(self, num_samples: int, seq_len: int, vocab_size: int, seed: int) -> None:
        g = torch.Generator().manual_seed(seed)
        start = torch.randint(0, vocab_size, (num_samples, 1), generator=g)
        stride = torch.randint(1, 8, (num_samples, 1), generator=g)
        tokens = (start + stride * torch.arange(seq_len + 1)) % vocab_size
        noise = torch.rand(num_samples, seq_len + 1, generator=g) < 0.1
        tokens[noise] = torch.randint(0, vocab_size, (int(noise.sum()),), generator=g)
        self.tokens = tokens

    def __len__(self) -> int:
        return self.tokens.shape[0]

    def __getitem__(self, i: int) -> torch.Tensor:
        return self.tokens[i]


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
    """Endless iterator of this rank's micro-batches. With shuffle on and one seed, rank r of dp
    takes permutation[r::dp], so the union over ranks of each step equals what one process with
    the whole global batch would take — the property the parity tests rely on."""

    def __init__(self, dataset: Dataset, micro: int, dp: int, rank: int, seed: int) -> None:
        if len(dataset) < micro * dp:  # type: ignore[arg-type]
            raise ValueError(
                f"dataset has {len(dataset)} samples, fewer than one step's micro({micro}) × dp({dp})"  # type: ignore[arg-type]
            )
        self.sampler = DistributedSampler(dataset, num_replicas=dp, rank=rank, shuffle=True, seed=seed, drop_last=True)
        self.loader = DataLoader(dataset, batch_size=micro, sampler=self.sampler, drop_last=True)
        self.epoch = 0
        self._it = iter(self.loader)

    def __iter__(self) -> "MicroBatches":
        return self

    def __next__(self) -> torch.Tensor:
        try:
            return next(self._it)
        except StopIteration:
            self.epoch += 1
            self.sampler.set_epoch(self.epoch)
            self._it = iter(self.loader)
            return next(self._it)
