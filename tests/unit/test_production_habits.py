"""What a production step includes, checked without launching: optim.clip_grad_norm's bad values
are one line, exit 2, nothing created; fp16 on CUDA is refused (no gradient scaler); the
performance model counts clipping's scalar all-reduces; FSDP inside a pipeline stage gathers in
the run's precision (MixedPrecisionPolicy), as plain fsdp does."""

from __future__ import annotations

import dataclasses
from types import SimpleNamespace

import pytest
import torch
import torch.distributed as dist

from launcher.cli import main
from launcher.config.compose import compose_config
from launcher.config.errors import ConfigError
from launcher.perf.comm import allreduce_s
from launcher.perf.links import LINKS
from launcher.perf.shapes import shape_for
from launcher.perf.step import comm_at
from launcher.train import loop
from launcher.trials.spec import sweep_trials

CLIP_MESSAGE = (
    "optim.clip_grad_norm={} must be a finite norm ≥ 0 (0 or null: no clipping); set e.g. optim.clip_grad_norm=1.0"
)


@pytest.mark.parametrize("value, shown", [("-1", "-1.0"), ("inf", "inf"), ("nan", "nan")])
def test_a_bad_clip_norm_is_one_line_exit_2_nothing_created(value, shown, tmp_path, capsys):
    results = tmp_path / "results"
    assert main(["sweep", f"optim.clip_grad_norm={value}", f"sweep.results_dir={results}"]) == 2
    assert capsys.readouterr().err == f"launcher: error: {CLIP_MESSAGE.format(shown)}\n"
    assert not results.exists()


def test_clipping_is_on_by_default_and_0_or_null_turn_it_off():
    assert compose_config([]).optim.clip_grad_norm == 1.0
    for off in ("0", "null"):
        assert not loop.clipping.enabled(compose_config([f"optim.clip_grad_norm={off}"]).optim.clip_grad_norm)


FP16_MESSAGE = (
    "precision=fp16 on CUDA needs loss scaling (a gradient scaler), which the built-in loop does not run; "
    "use precision=bf16 (same peak on A100/H100) or precision=fp32"
)


def test_fp16_on_cuda_is_refused_in_one_line_before_any_trial_and_in_the_payload(tmp_path, capsys):
    results = tmp_path / "results"
    assert main(["sweep", "precision=fp16", "cluster.device=cuda", f"sweep.results_dir={results}"]) == 2
    assert capsys.readouterr().err == f"launcher: error: {FP16_MESSAGE}\n"
    assert not results.exists()
    # cluster.device=auto: known only in the payload, which refuses before touching the GPU.
    cfg = compose_config(["precision=fp16"])
    with pytest.raises(ConfigError) as raised:
        loop.with_precision(cfg, torch.device("cuda", 0))
    assert str(raised.value) == FP16_MESSAGE
    assert loop.with_precision(cfg, torch.device("cpu")).precision == "fp16"  # CPU autocast: allowed
    assert loop.with_precision(compose_config(["precision=auto"]), torch.device("cuda", 0)).precision == "bf16"
    # A plan may still model an fp16 run (published fp16 results are replayed that way).
    assert compose_config(["precision=fp16", "cluster=example_gpu_site"]).precision == "fp16"


def norm_terms(overrides: list[str], world: int) -> tuple[float, float, float]:
    """(dp, tp, pp) exposed seconds clipping adds to the plan of `overrides` at `world` GPUs."""
    on, off = (compose_config(overrides + [f"optim.clip_grad_norm={v}", "cluster=example_gpu_site"]) for v in (1, 0))
    intra, inter = LINKS["nvlink"], LINKS["ib400"]
    a, b = (comm_at(shape_for(cfg, world), intra, inter, compute_s=1.0) for cfg in (on, off))
    return (a.dp_exposed_s - b.dp_exposed_s, a.tp_exposed_s - b.tp_exposed_s, a.pp_exposed_s - b.pp_exposed_s)


def test_the_plan_counts_one_scalar_all_reduce_per_group_that_splits_the_gradients():
    big = ["model=gpt_1_3b", "batch.micro=4", "parallel.microbatches=4"]
    three_d = big + ["parallel=fsdp_tp_pp", "parallel.tp=2", "parallel.pp=2"]
    shape = shape_for(compose_config(three_d + ["cluster=example_gpu_site"]), 32)
    groups, topo = shape.groups, shape.topology
    intra, inter = LINKS["nvlink"], LINKS["ib400"]
    expected = tuple(allreduce_s(4, getattr(groups, g), topo, intra, inter) for g in ("dp", "tp", "pp"))
    assert norm_terms(three_d, 32) == pytest.approx(expected, rel=1e-9)
    assert all(0 < t < 1e-4 for t in expected)  # latency, not bandwidth: microseconds
    assert norm_terms(big + ["parallel=ddp"], 8) == (0.0, 0.0, 0.0)  # DDP's gradient is whole: a local norm


# --- the pipeline's FSDP stages, built on a 1-rank gloo group -----------------------------------


@pytest.fixture(scope="module")
def group():
    dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
    yield
    dist.destroy_process_group()


def test_fsdp_inside_a_pipeline_stage_gathers_in_the_run_precision(group, monkeypatch):
    from launcher.train.engines import pipeline  # lazy: importing pipelining costs ~0.5 s, this test only
    from launcher.train.engines.base import Topology
    from launcher.train.models import build_model

    policies = []
    real = pipeline.fully_shard

    def spy(module, **kwargs):
        policies.append(kwargs.get("mp_policy"))
        return real(module, **kwargs)

    monkeypatch.setattr(pipeline, "fully_shard", spy)
    cfg = compose_config(["parallel=fsdp_pp", "precision=bf16", "model.n_layers=2", "model.seq_len=16"])
    cfg = dataclasses.replace(cfg, precision="bf16")
    topo = Topology.build(SimpleNamespace(dp=1, pp=1, tp=1), 0, torch.device("cpu"), timeout_s=60)
    with torch.device("meta"):
        model = build_model(cfg.model)
    pipeline.PipelineEngine(model, topo, cfg, torch.device("cpu"))
    assert len(policies) == 3  # two blocks and the stage's root
    assert all(p is not None and p.param_dtype == torch.bfloat16 and p.reduce_dtype == torch.float32 for p in policies)


@pytest.mark.parametrize("gpus", ["cluster.gpus_per_node=2", "cluster.gpus_per_task=1"])
def test_fp16_with_device_auto_on_a_slurm_gpu_job_is_refused_before_submission(gpus, tmp_path, capsys):
    """cluster.device=auto on Slurm with GPUs asked for: the ranks get CUDA, so fp16 is refused at plan time (before,
    it reached the payload after sbatch). Without GPUs asked for, auto stays the payload's to decide."""
    results = tmp_path / "results"
    argv = ["sweep", "cluster=devcluster", "cluster.device=auto", "precision=fp16", gpus, "sweep.nodes=[1]"]
    assert main([*argv, f"sweep.results_dir={results}"]) == 2
    assert capsys.readouterr().err == f"launcher: error: {FP16_MESSAGE}\n"
    assert not results.exists()
    no_gpus = compose_config(["cluster=devcluster", "cluster.device=auto", "precision=fp16", "sweep.nodes=[1]"])
    assert [t.nodes for t in sweep_trials(no_gpus)] == [1]
