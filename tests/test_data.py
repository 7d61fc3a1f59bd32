"""The data split that makes parity hold: ranks × micro-steps cover exactly one global batch."""

from __future__ import annotations

import numpy as np
import torch

from launcher.train.data import FileTokens, MicroBatches, SyntheticTokens


def _steps(dataset, micro, dp, accum, steps):
    """Per optimizer step, the set of sample rows every rank's micro-batches cover."""
    its = [MicroBatches(dataset, micro, dp, rank, seed=0) for rank in range(dp)]
    out = []
    for _ in range(steps):
        rows = [next(it) for it in its for _ in range(accum)]
        out.append(sorted(tuple(r.tolist()) for b in rows for r in b))
    return out


def test_synthetic_is_deterministic_and_learnable_shape():
    a, b = SyntheticTokens(16, 8, 50, seed=3), SyntheticTokens(16, 8, 50, seed=3)
    assert torch.equal(a.tokens, b.tokens)
    assert a.tokens.shape == (16, 9) and int(a.tokens.max()) < 50


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
