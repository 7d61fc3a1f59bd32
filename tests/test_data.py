"""The data split that makes parity hold: ranks × micro-steps cover exactly one global batch;
and the stream drawn on demand is the one a materialised dataset behind DistributedSampler and a
DataLoader gave (the old way), batch for batch."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from torch.utils.data import DataLoader, Dataset, DistributedSampler

from launcher.train.data import FileTokens, MicroBatches, SyntheticTokens


def _steps(dataset, micro, dp, accum, steps):
    """Per optimizer step, the set of sample rows every rank's micro-batches cover."""
    its = [MicroBatches(dataset, micro, dp, rank, seed=0) for rank in range(dp)]
    out = []
    for _ in range(steps):
        rows = [next(it) for it in its for _ in range(accum)]
        out.append(sorted(tuple(r.tolist()) for b in rows for r in b))
    return out


class Materialised(Dataset):
    """The old way: every sample of the trial generated up front and held (steps × global batch
    rows on every rank)."""

    def __init__(self, dataset: Dataset) -> None:
        self.tokens = torch.stack([dataset[i] for i in range(len(dataset))])  # type: ignore[arg-type]

    def __len__(self) -> int:
        return self.tokens.shape[0]

    def __getitem__(self, i: int) -> torch.Tensor:
        return self.tokens[i]


def old_stream(dataset: Dataset, micro: int, dp: int, rank: int, seed: int, count: int) -> list[torch.Tensor]:
    """The first `count` micro-batches as the old loader drew them: DistributedSampler + DataLoader,
    set_epoch at each epoch's end."""
    sampler = DistributedSampler(dataset, num_replicas=dp, rank=rank, shuffle=True, seed=seed, drop_last=True)
    loader = DataLoader(dataset, batch_size=micro, sampler=sampler, drop_last=True)
    out, epoch, it = [], 0, iter(loader)
    while len(out) < count:
        try:
            out.append(next(it))
        except StopIteration:
            epoch += 1
            sampler.set_epoch(epoch)
            it = iter(loader)
    return out


def test_synthetic_is_deterministic_and_learnable_shape():
    a, b = SyntheticTokens(16, 8, 50, seed=3), SyntheticTokens(16, 8, 50, seed=3)
    rows = torch.stack([a[i] for i in range(16)])
    assert torch.equal(rows, torch.stack([b[i] for i in range(16)]))
    assert rows.shape == (16, 9) and int(rows.max()) < 50
    # Most steps follow the rule token[t+1] = token[t] + stride (mod vocab): learnable.
    steps = (rows[:, 1:] - rows[:, :-1]) % 50
    assert (steps == steps.mode(dim=1).values[:, None]).float().mean() > 0.7


def test_a_synthetic_sample_depends_on_seed_and_index_only():
    """Not on how many samples the trial has (steps × global batch grows with the world size)."""
    small, large = SyntheticTokens(16, 32, 50, seed=3), SyntheticTokens(100_000, 32, 50, seed=3)
    assert all(torch.equal(small[i], large[i]) for i in range(16))
    assert not torch.equal(small[0], SyntheticTokens(16, 32, 50, seed=4)[0])
    with pytest.raises(IndexError):
        small[16]


@pytest.mark.parametrize("micro,dp", [(8, 1), (4, 2), (2, 4), (3, 2)])
def test_batch_k_on_demand_equals_batch_k_of_the_materialised_way(micro, dp):
    """Every rank's k-th micro-batch, across epoch ends (48 samples: a few micro-batches per
    epoch), is the one the old DistributedSampler + DataLoader over a materialised dataset gave."""
    ds = SyntheticTokens(48, 16, 50, seed=7)
    held = Materialised(ds)
    for rank in range(dp):
        on_demand = MicroBatches(ds, micro, dp, rank, seed=7)
        for k, old in enumerate(old_stream(held, micro, dp, rank, seed=7, count=20)):
            assert torch.equal(next(on_demand), old), (rank, k)


def test_every_split_of_a_global_batch_sees_the_same_samples():
    ds = SyntheticTokens(64, 8, 50, seed=0)
    reference = _steps(ds, micro=8, dp=1, accum=1, steps=4)
    assert _steps(ds, micro=4, dp=2, accum=1, steps=4) == reference
    assert _steps(ds, micro=2, dp=1, accum=4, steps=4) == reference
    assert _steps(ds, micro=2, dp=2, accum=2, steps=4) == reference


def test_file_tokens_windows(tmp_path):
    path = tmp_path / "tokens.bin"
    np.arange(25, dtype="<u2").tofile(path)
    ds = FileTokens(path, "uint16", seq_len=8)
    assert len(ds) == 3  # (25 − 1) // 8
    assert ds[1].tolist() == list(range(8, 17))
    assert ds[1].dtype == torch.int64
