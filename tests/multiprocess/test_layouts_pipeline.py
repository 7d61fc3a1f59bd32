"""Pipeline layouts (pipeline, dp_pp, fsdp_pp) equal a 1-process reference: same losses and
same final parameters within 1e-6, for every schedule, with data parallelism over stages, and
with gradient accumulation across schedule steps (the trap: torch's per-step gradient scaling
would rescale what earlier steps accumulated). Each trial is the real payload in real
processes; 4-rank trials run oversubscribed on 2 cores."""

from __future__ import annotations

import math

import pytest
import torch

from launcher.config.compose import compose_config
from launcher.io import read_json
from launcher.train.engines.stages import StageModule
from launcher.train.models import build_model, materialise
from tests.support.layout_parity import BASE, assert_same, launch, run_trial

pytestmark = pytest.mark.torch_dist


@pytest.fixture(scope="module")
def gpipe(tmp_path_factory):
    """The GPipe trial: its parity and its record are checked by separate tests."""
    tmp = tmp_path_factory.mktemp("pp_gpipe")
    run = launch(tmp, "gpipe", 2, ["parallel=pipeline", "parallel.schedule=gpipe"])
    return run, read_json(tmp / "gpipe" / "record.json")


def test_gpipe_two_stages_equal_one_process(gpipe, parity_ref):
    assert_same(gpipe[0], parity_ref)


def test_1f1b_two_stages_equal_one_process(parity_ref, tmp_path):
    assert_same(launch(tmp_path, "1f1b", 2, ["parallel=pipeline", "parallel.schedule=1f1b"]), parity_ref)


def test_interleaved_1f1b_four_stages_on_two_ranks_equal_one_process(parity_ref, tmp_path):
    over = ["parallel=pipeline", "parallel.schedule=interleaved_1f1b", "parallel.virtual_stages=2"]
    assert_same(launch(tmp_path, "interleaved", 2, over), parity_ref)
    layout = read_json(tmp_path / "interleaved" / "record.json")["metrics"]["layout"]
    assert layout["bubble_theory"] == (2 - 1) / (2 * 4 + 2 - 1)
    assert layout["stages_per_rank"] == 2


def test_pipeline_with_accumulation_equals_one_big_step(parity_ref, tmp_path):
    """micro 4 × accum 2: two schedule steps per optimizer step must accumulate, not rescale."""
    assert_same(launch(tmp_path, "accum", 2, ["parallel=pipeline", "batch.micro=4", "batch.accum=2"]), parity_ref)


def test_dp_pp_four_ranks_equal_one_process(parity_ref, tmp_path):
    """dp 2 × pp 2, micro 4 per replica: DDP averages each stage's gradient over dp."""
    assert_same(launch(tmp_path, "dp_pp", 4, ["parallel=dp_pp", "parallel.pp=2", "batch.micro=4"]), parity_ref)


def test_fsdp_pp_four_ranks_equal_one_process(parity_ref, tmp_path):
    over = ["parallel=fsdp_pp", "parallel.pp=2", "batch.micro=4", "parallel.reshard_after_forward=true"]
    assert_same(launch(tmp_path, "fsdp_pp", 4, over), parity_ref)


def test_pipeline_record_has_bubble_theory_and_measured(gpipe):
    record = gpipe[1]
    assert record["trial"]["pp"] == 2 and record["trial"]["dp"] == 1
    layout = record["metrics"]["layout"]
    p, v, m = 2, 1, compose_config(BASE).parallel.microbatches
    assert layout["bubble_theory"] == (p - 1) / (v * m + p - 1)
    assert len(layout["bubble_measured_per_rank"]) == 2
    assert all(0.0 <= b <= 1.0 for b in layout["bubble_measured_per_rank"])
    assert 0.0 <= layout["bubble_measured"] <= 1.0
    assert layout["bubble_measured"] == max(layout["bubble_measured_per_rank"])
    assert layout["schedule"] == "gpipe"  # the same on every rank: stored once
    assert layout["stages_per_rank"] == 1


def test_bf16_pipeline_runs(tmp_path):
    """bf16 autocast is ~10× slower than fp32 on this CPU: a 3-step smoke test only."""
    record = run_trial(tmp_path, "bf16", 2, ["parallel=pipeline", "precision=bf16"], steps=3, save_params=False)
    losses = record["metrics"]["losses"]
    assert len(losses) == 3 and all(math.isfinite(x) for x in losses)


def test_a_stage_built_on_meta_allocates_only_its_own_parameters_with_the_reference_values():
    """What a pipeline rank builds: the model on the meta device, then only its stage
    materialised, each parameter from the seed and its reference name."""
    cfg = compose_config(BASE).model
    reference = build_model(cfg, seed=11).state_dict()
    with torch.device("meta"):
        model = build_model(cfg)
    last = materialise(StageModule(model, 1, 2), torch.device("cpu"), seed=11)
    mine = last.state_dict()
    assert set(mine) == {k for k in reference if k.startswith(("blocks.2.", "blocks.3.", "ln_f.", "head."))}
    assert all(torch.equal(mine[k], reference[k]) for k in mine)
    assert model.tok_emb.weight.is_meta and all(p.is_meta for p in model.blocks[0].parameters())  # never allocated
