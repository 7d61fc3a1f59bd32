"""Expert parallel (fsdp_ep) equals the 1-process reference: a mixture-of-experts model
(model=tiny_moe, 4 experts top-2 with a shared one and the load-balancing loss) whose experts
are split over ep ranks with all-to-all dispatch and combine, the rest sharded by FSDP2 over dp:
ep 2 on 2 ranks, ep 2 with dp 4 (experts sharded over 2 ranks too), ep 4 on 4 ranks, and
accumulation; ddp_ep likewise at 2 and 4 ranks; and one `launcher sweep` of fsdp_ep. Each trial is
the real payload in real processes (tests/support/layout_parity.py); losses and gathered final
parameters must match within 1e-6 (fp32)."""

from __future__ import annotations

import pandas as pd
import pytest

from launcher.cli import main
from launcher.io import read_json
from tests.support.layout_parity import assert_same, launch, reference

pytestmark = pytest.mark.torch_dist

MOE = ["model=tiny_moe"]


@pytest.fixture(scope="module")
def ref(tmp_path_factory):
    """1 process, DDP, micro-batch 8: global batch 8 per step, the MoE model whole."""
    return reference(tmp_path_factory.mktemp("ref"), MOE)


@pytest.mark.parametrize(
    ("ranks", "ep", "micro", "accum"),
    [(2, 2, 4, 1), (4, 2, 2, 1), (4, 4, 2, 1), (2, 2, 2, 2)],
    ids=["dp2_ep2", "dp4_ep2", "dp4_ep4", "dp2_ep2_accum2"],
)
def test_expert_parallel_equals_reference(ref, tmp_path, ranks, ep, micro, accum):
    over = [*MOE, "parallel=fsdp_ep", f"parallel.ep={ep}", f"batch.micro={micro}", f"batch.accum={accum}"]
    name = f"ep{ep}_ws{ranks}_a{accum}"
    assert_same(launch(tmp_path, name, ranks, over), ref, model=MOE)


def test_expert_parallel_with_full_recompute_equals_reference(ref, tmp_path):
    """Full activation checkpointing replays each MoE block's forward in backward, its dispatch and
    combine all-to-alls with it, in the same order on every rank."""
    over = [*MOE, "parallel=fsdp_ep", "parallel.ep=2", "batch.micro=4", "model.activation_checkpointing=full"]
    assert_same(launch(tmp_path, "ep_full", 2, over), ref, model=MOE)


@pytest.mark.parametrize(("ranks", "ep"), [(2, 2), (4, 2)], ids=["dp2_ep2", "dp4_ep2"])
def test_ddp_expert_parallel_equals_reference(ref, tmp_path, ranks, ep):
    """ddp_ep: the experts split as under fsdp_ep, their gradients all-reduced by hand over the
    dp ÷ ep ranks holding them (2 at dp 4), the rest by DDP."""
    over = [*MOE, "parallel=ddp_ep", f"parallel.ep={ep}", f"batch.micro={8 // ranks}"]
    assert_same(launch(tmp_path, f"ddp_ep{ep}_ws{ranks}", ranks, over), ref, model=MOE)


def test_fsdp_runs_the_moe_model_whole_and_equals_reference(ref, tmp_path):
    """The same model under plain FSDP (every expert on every rank): the aux loss per sequence
    keeps parity across the batch's split too."""
    assert_same(launch(tmp_path, "fsdp", 2, [*MOE, "parallel=fsdp", "batch.micro=4"]), ref, model=MOE)


def test_a_sweep_of_fsdp_ep_runs_each_size_with_its_expert_groups(tmp_path, capsys):
    """`launcher sweep` end to end: ep 2 at 2 and 4 ranks (one group; two groups whose experts FSDP
    shards over 2 ranks), every trial completed with ep in its record."""
    over = ["model=tiny_moe", "parallel=fsdp_ep", "parallel.ep=2", "sweep.world_sizes=[2,4]", "sweep.steps=3"]
    over += ["sweep.warmup_steps=1", f"sweep.results_dir={tmp_path}", "sweep.name=ep", "--quiet"]
    assert main(["sweep", *over]) == 0, capsys.readouterr().err
    df = pd.read_csv(tmp_path / "ep" / "results.csv")
    assert (df["status"] == "completed").all(), df[["trial_id", "reason"]].to_string()
    assert sorted(zip(df["world_size"], df["dp"], strict=True)) == [(2, 2), (4, 4)]
    for tdir in sorted((tmp_path / "ep" / "trials").iterdir()):
        record = read_json(tdir / "record.json")
        assert (record["trial"]["ep"], record["metrics"]["layout"]["ep"]) == (2, 2)
