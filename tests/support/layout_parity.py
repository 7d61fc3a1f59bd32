"""The parity tests' one set of helpers (tests/multiprocess/: test_parity.py, test_layouts_pipeline.py,
test_layouts_sharded.py): run one real trial (the payload, in real processes) and compare its
per-step losses and final full parameters with a 1-process reference."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import torch

from launcher.config.compose import compose_config
from launcher.io import read_json
from launcher.run.local import run_local
from launcher.train.models import build_model
from launcher.trials.folder import write_trial
from launcher.trials.spec import make_trial

STEPS = 5
GLOBAL_BATCH = 8
"""Every parity trial splits the reference's global batch of 8 its own way."""
# SGD: parameter parity is exact arithmetic up to summation order (see test_parity.py on Adam).
# 4 layers and 8 heads so that pp=2 × v=2 stages and tp=2 or 4 all divide the model.
BASE = ["optim=sgd", "optim.lr=0.05", "seed=11", "model.n_layers=4", "model.n_heads=8", "batch.micro=8"]


def run_trial(
    tmp: Path, name: str, world_size: int, overrides: list[str], *, steps: int = STEPS, save_params: bool = True
) -> dict[str, Any]:
    """Launch BASE + `overrides` on the local executor in `tmp/name`; returns its completed record."""
    cfg = compose_config(BASE + overrides)
    tdir = tmp / name
    write_trial(tdir, make_trial(cfg, index=0, world_size=world_size, steps=steps, warmup_steps=1), cfg)
    extra = ["--save-params", str(tdir / "params.pt")] if save_params else []
    out = run_local(tdir, world_size=world_size, threads=1, timeout_s=300, extra_args=extra)
    logs = "\n".join((tdir / f"rank{r}.log").read_text()[-2000:] for r in range(world_size))
    # The record, written before teardown, is the proof of a finished trial: a rank that aborts
    # in gloo's teardown afterwards (seen rarely here, see shared notes) does not undo it.
    assert (tdir / "record.json").exists(), f"{out.reason()}\n{logs}"
    record = read_json(tdir / "record.json")
    assert record["status"] == "completed", record.get("reason")
    return record


def launch(tmp: Path, name: str, world_size: int, overrides: list[str]) -> tuple[list[float], dict[str, torch.Tensor]]:
    """(per-step losses, final full parameters) of a launched trial."""
    record = run_trial(tmp, name, world_size, overrides)
    assert record["trial"]["global_batch"] == GLOBAL_BATCH
    return record["metrics"]["losses"], torch.load(tmp / name / "params.pt")


def reference(tmp: Path, overrides: list[str] | None = None):
    """1 process, DDP layout, same global batch: what every layout must reproduce."""
    return launch(tmp, "reference", 1, ["parallel=ddp"] + (overrides or []))


def assert_same(run, ref, rtol: float = 1e-6, atol: float = 1e-6, *, model: list[str] | None = None) -> None:
    """`run` equals `ref` in losses and final parameters; `model`: the model overrides both ran
    with (e.g. ["model=tiny_llama"]), for the check that training moved the parameters."""
    losses, params = run
    ref_losses, ref_params = ref
    np.testing.assert_allclose(losses, ref_losses, rtol=rtol, atol=atol)
    assert sorted(params) == sorted(ref_params)
    for name in ref_params:
        torch.testing.assert_close(params[name], ref_params[name], rtol=rtol, atol=atol, msg=name)
    # Equal because both trained, not because neither moved: compare with the seed's init.
    torch.manual_seed(11)
    init = build_model(compose_config(BASE + (model or [])).model).state_dict()
    assert max((ref_params[k] - init[k]).abs().max().item() for k in init) > 1e-3
