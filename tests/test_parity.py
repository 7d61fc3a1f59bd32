"""Launched training equals a 1-process reference: the same global batch split across ranks
(DDP) or across micro-steps (accumulation with no_sync) gives the same losses and the same
final parameters within 1e-6. Each trial here is the real payload in real processes.

Parameter parity uses SGD: Adam divides every element by its own gradient RMS, so where the
true gradient is zero (the attention key bias: softmax ignores a shift of every key) the
summation-order noise of a different split (~1e-12) becomes an lr-sized step. That is Adam's
arithmetic, not the split's; with AdamW the losses are still compared."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

from launcher.config.compose import compose_config
from launcher.io import atomic_write_json, read_json
from launcher.run.local import run_local
from launcher.trials.spec import make_trial, trial_document
from launcher.train.models import build_model

pytestmark = pytest.mark.torch_dist

STEPS = 6
BASE = ["sweep.warmup_steps=1", "optim=sgd", "optim.lr=0.05", "seed=7"]


def launch(tmp: Path, name: str, world_size: int, overrides: list[str]) -> tuple[list[float], dict]:
    cfg = compose_config(BASE + overrides)
    trial = make_trial(cfg, index=0, world_size=world_size, steps=STEPS, warmup_steps=1)
    tdir = tmp / name
    atomic_write_json(tdir / "trial.json", trial_document(trial, cfg))
    out = run_local(tdir, world_size=world_size, threads=1, timeout_s=300, extra_args=["--save-params", str(tdir / "params.pt")])
    # The record (written before teardown) decides; a rare gloo abort at exit does not undo it.
    assert (tdir / "record.json").exists(), out.reason()
    record = read_json(tdir / "record.json")
    assert record["status"] == "completed"
    assert record["trial"]["global_batch"] == 8
    return record["metrics"]["losses"], torch.load(tdir / "params.pt")


def assert_same(run, reference):
    losses, params = run
    ref_losses, ref_params = reference
    np.testing.assert_allclose(losses, ref_losses, rtol=1e-6, atol=1e-6)
    assert params.keys() == ref_params.keys()
    for name in params:
        torch.testing.assert_close(params[name], ref_params[name], rtol=1e-6, atol=1e-6, msg=name)
    # Equal because both trained, not because neither moved: compare with the seed's init.
    torch.manual_seed(7)
    init = build_model(compose_config(BASE).model).state_dict()
    moved = max((ref_params[k] - init[k]).abs().max().item() for k in init)
    assert moved > 1e-3


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
    """1 process, micro-batch 8, no accumulation."""
    return launch(tmp_path_factory.mktemp("ref"), "ref", 1, ["batch.micro=8"])


def test_ddp_two_ranks_equal_one_process(reference, tmp_path):
    assert_same(launch(tmp_path, "ddp", 2, ["batch.micro=4"]), reference)


def test_accumulation_four_micro_steps_equal_one_big_step(reference, tmp_path):
    assert_same(launch(tmp_path, "accum", 1, ["batch.micro=2", "batch.accum=4"]), reference)


def test_ddp_with_accumulation_equals_one_process(reference, tmp_path):
    assert_same(launch(tmp_path, "ddp_accum", 2, ["batch.micro=2", "batch.accum=2"]), reference)


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
