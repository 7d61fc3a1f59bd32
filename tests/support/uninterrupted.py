"""The requeue tests' reference (tests/slurm/test_faults.py, tests/slurm/test_requeue_torchrun.py): the 2-rank
run they interrupt and resume, trained here locally and never interrupted; a requeued run must end with its
final parameters. One run serves both files (tests/conftest.py `uninterrupted`, a session fixture)."""

from __future__ import annotations

from pathlib import Path

import torch

from launcher.config.compose import compose_config
from launcher.io import atomic_write_json
from launcher.run.local import run_local
from launcher.trials.folder import trial_document
from launcher.trials.spec import make_trial

DEV = ["cluster=devcluster", "optim=sgd", "optim.lr=0.05", "seed=3"]
"""The requeued runs' config on the dev cluster (the reference drops `cluster=devcluster`: it runs here)."""
STEPS = 150
"""Steps of the requeued runs and of the reference."""


def uninterrupted_params(tmp: Path) -> dict[str, torch.Tensor]:
    """Final parameters of the 2-rank run of DEV (2 warm-up steps), launched locally in `tmp`."""
    cfg = compose_config(DEV[1:])
    trial = make_trial(cfg, index=0, world_size=2, steps=STEPS, warmup_steps=2)
    atomic_write_json(tmp / "trial.json", trial_document(trial, cfg))
    outcome = run_local(tmp, world_size=2, threads=1, timeout_s=300, extra_args=["--save-params", str(tmp / "p.pt")])
    assert outcome.reason() is None
    return torch.load(tmp / "p.pt")
