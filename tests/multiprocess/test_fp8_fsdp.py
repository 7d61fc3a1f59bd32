"""precision=fp8 under FSDP (issue 30, item 8): after each optimizer step the fp8 weights' scales are
precomputed for the next all-gathers in one all-reduce (torchao's precompute_float8_dynamic_scale_for_fsdp)
instead of one per layer per gather. A real 2-rank fsdp trial of torchao's float8 layers on CPU ranks
(tests/support/fp8_on_cpu.py lifts the launcher's CPU refusal; torch runs float8 matmuls there): the
record counts one precompute per optimizer step, and the parameters equal those of the same trial
trained without it. Skipped where torchao (the fp8 extra, in the test extra too) is not installed."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import torch

from launcher.config.compose import compose_config
from launcher.io import read_json
from launcher.run.local import run_local
from launcher.train import float8
from launcher.train.models import build_model
from launcher.trials.folder import write_trial
from launcher.trials.payload import PYTHON, Payload, TrialFile
from launcher.trials.spec import make_trial
from tests.support.layout_parity import BASE, STEPS

pytest.importorskip("torchao.float8")
pytestmark = pytest.mark.torch_dist

ROOT = Path(__file__).resolve().parents[2]
FP8 = [*BASE, "precision=fp8", "cluster.device=cpu", "model.n_layers=2"]


def fp8_trial(
    tmp: Path, name: str, layout: str, *, precompute: bool = True, overrides: tuple[str, ...] | list[str] = ()
) -> tuple[dict, dict[str, torch.Tensor]]:
    """(record, final full parameters) of a 2-rank fp8 trial of `layout` on CPU ranks."""
    cfg = compose_config([*FP8, *overrides, f"parallel={layout}"])
    tdir = tmp / name
    write_trial(tdir, make_trial(cfg, index=0, world_size=2, steps=STEPS, warmup_steps=1), cfg)
    argv = (PYTHON, "-m", "tests.support.fp8_on_cpu", "--trial", TrialFile(name="trial.json"))
    argv += ("--record", TrialFile(name="record.json"), "--save-params", str(tdir / "params.pt"))
    path = os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))  # the ranks import tests.support
    env = (("PYTHONPATH", path), ("LAUNCHER_TEST_FP8_PRECOMPUTE", "on" if precompute else "off"))
    out = run_local(tdir, world_size=2, threads=1, timeout_s=300, payload=Payload(argv=argv, env=env))
    logs = "\n".join((tdir / f"rank{r}.log").read_text()[-3000:] for r in range(2))
    assert (tdir / "record.json").exists(), f"{out.reason()}\n{logs}"
    record = read_json(tdir / "record.json")
    assert record["status"] == "completed", f"{record.get('reason')}\n{logs}"
    assert record["config"]["precision"] == "fp8"
    return record, torch.load(tdir / "params.pt")


def test_fsdp_fp8_precomputes_the_scales_once_per_step_and_trains_as_without(tmp_path):
    record, params = fp8_trial(tmp_path, "precomputed", "fsdp")
    assert record["metrics"]["fp8_scales_precomputed_steps"] == STEPS  # warm-up step included: every step
    model = build_model(compose_config(FP8).model)
    converted = [name for name, module in model.named_modules() if float8.wants_fp8(name, module)]
    assert len(converted) == 12  # q, k, v, proj and the two ffn layers of each of 2 blocks
    assert record["metrics"]["fp8_scales_precomputed_weights"] == len(converted)  # every one, in one call
    plain, plain_params = fp8_trial(tmp_path, "per_gather", "fsdp", precompute=False)
    assert "fp8_scales_precomputed_steps" not in plain["metrics"]
    torch.testing.assert_close(record["metrics"]["losses"], plain["metrics"]["losses"], rtol=1e-6, atol=1e-6)
    assert sorted(params) == sorted(plain_params)
    for name in params:
        torch.testing.assert_close(params[name], plain_params[name], rtol=1e-6, atol=1e-6, msg=name)


def test_fsdp_ep_precomputes_the_experts_scales_on_their_own_mesh(tmp_path):
    """Under fsdp_ep the experts are sharded on the edp mesh, the rest on dp: torchao's precompute stacks
    its weights' amaxes into one tensor, which fails across meshes, so it runs once per mesh."""
    moe = ["model=tiny_moe", "model.n_layers=2", "model.n_heads=8", "parallel.ep=2"]
    record, _ = fp8_trial(tmp_path, "experts", "fsdp_ep", overrides=moe)
    model = build_model(compose_config([*FP8, *moe]).model)
    converted = [name for name, module in model.named_modules() if float8.wants_fp8(name, module)]
    experts = [name for name in converted if ".experts." in name]
    assert experts and record["metrics"]["fp8_scales_precomputed_steps"] == STEPS
    # A rank holds 2 of the 4 experts of the MoE block: half their layers, and every other converted one.
    assert record["metrics"]["fp8_scales_precomputed_weights"] == len(converted) - len(experts) // 2
