"""Launched training equals a 1-process reference: the same global batch split across ranks
(DDP) or across micro-steps (accumulation with no_sync) gives the same losses and the same
final parameters within 1e-6. Each trial here is the real payload in real processes
(helpers: tests/support/layout_parity.py).

Parameter parity uses SGD: Adam divides every element by its own gradient RMS, so where the
true gradient is zero (the attention key bias: softmax ignores a shift of every key) the
summation-order noise of a different split (~1e-12) becomes an lr-sized step. That is Adam's
arithmetic, not the split's; with AdamW the losses are still compared."""

from __future__ import annotations

import numpy as np
import pytest

from tests.support.layout_parity import STEPS, assert_same, launch

pytestmark = pytest.mark.torch_dist


def test_ddp_two_ranks_equal_one_process(parity_ref, tmp_path):
    assert_same(launch(tmp_path, "ddp", 2, ["batch.micro=4"]), parity_ref)


def test_accumulation_four_micro_steps_equal_one_big_step(parity_ref, tmp_path):
    assert_same(launch(tmp_path, "accum", 1, ["batch.micro=2", "batch.accum=4"]), parity_ref)


def test_ddp_with_accumulation_equals_one_process(parity_ref, tmp_path):
    assert_same(launch(tmp_path, "ddp_accum", 2, ["batch.micro=2", "batch.accum=2"]), parity_ref)


def test_adamw_two_ranks_match_one_process_in_loss(tmp_path):
    adam = ["optim=adamw", "optim.lr=0.01"]
    losses, _ = launch(tmp_path, "adam_ddp", 2, adam + ["batch.micro=4"])
    ref_losses, _ = launch(tmp_path, "adam_ref", 1, adam + ["batch.micro=8"])
    np.testing.assert_allclose(losses, ref_losses, rtol=1e-6, atol=1e-6)


def test_file_backed_tokens_two_ranks_equal_one_process(tmp_path):
    path = tmp_path / "tokens.bin"
    rng = np.random.default_rng(0)
    rng.integers(0, 256, size=STEPS * 8 * 65 + 1, dtype=np.uint16).astype("<u2").tofile(path)
    data = ["data=file", f"data.path={path}"]
    assert_same(
        launch(tmp_path, "file_ddp", 2, data + ["batch.micro=4"]),
        launch(tmp_path, "file_ref", 1, data + ["batch.micro=8"]),
    )
