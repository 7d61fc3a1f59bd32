"""Checkpoint and resume (torch.distributed.checkpoint) with real 2-rank trials: a run killed
mid-way and rerun from its trial folder ends with the parameters of a run never interrupted."""

from __future__ import annotations

import dataclasses

import pytest
import torch

from launcher.config.compose import compose_config
from launcher.io import atomic_write_json, read_json
from launcher.run.local import run_local
from launcher.trials.folder import trial_document
from launcher.trials.spec import make_trial

pytestmark = pytest.mark.torch_dist

STEPS, EVERY = 20, 5


@pytest.mark.parametrize("layout", ["ddp", "fsdp"])  # tp resumes the same way (DTensor shards, like fsdp)
def test_killed_run_resumes_to_the_uninterrupted_parameters(layout, tmp_path, monkeypatch):
    cfg = compose_config(["optim=sgd", "optim.lr=0.05", "seed=3", f"parallel={layout}"])
    trial = make_trial(cfg, index=0, world_size=2, steps=STEPS, warmup_steps=2)
    for name, t in (("plain", trial), ("ckpt", dataclasses.replace(trial, checkpoint=True, checkpoint_every=EVERY))):
        (tmp_path / name).mkdir()
        atomic_write_json(tmp_path / name / "trial.json", trial_document(t, cfg))

    def run(name: str):
        return run_local(
            tmp_path / name,
            world_size=2,
            threads=1,
            timeout_s=300,
            extra_args=["--save-params", str(tmp_path / name / "params.pt")],
        )

    assert run("plain").reason() is None
    monkeypatch.setenv("LAUNCHER_FAULT", "kill:1:12")  # rank 1 SIGKILLs itself at step 12
    assert "rank 1 was killed by SIGKILL" in run("ckpt").reason()
    assert read_json(tmp_path / "ckpt" / "checkpoint" / "latest.json")["step"] == 10
    monkeypatch.delenv("LAUNCHER_FAULT")
    assert run("ckpt").reason() is None
    record = read_json(tmp_path / "ckpt" / "record.json")
    assert record["status"] == "completed" and record["metrics"]["resumed_from_step"] == 10
    assert (tmp_path / "ckpt" / "record.attempt0.json").exists()  # the killed attempt's record, kept aside
    plain, resumed = torch.load(tmp_path / "plain" / "params.pt"), torch.load(tmp_path / "ckpt" / "params.pt")
    assert plain.keys() == resumed.keys()
    assert max((plain[k] - resumed[k]).abs().max().item() for k in plain) <= 1e-6
    # Only the last checkpoints are kept.
    assert sorted(p.name for p in (tmp_path / "ckpt" / "checkpoint").glob("step-*")) == ["step-0000010", "step-0000015"]
