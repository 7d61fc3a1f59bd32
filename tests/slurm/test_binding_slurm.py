"""What each rank runs on, on the dev cluster with 4 stand-in GPUs per node: a sweep of 1 and 2
nodes, srun and torchrun launch, where the 2-node trial's 8 ranks sit on 8 distinct (host, GPU)
pairs with CPUs for their threads, as the record's `rank_bindings` says. The pure checks:
tests/unit/test_binding.py."""

from __future__ import annotations

import os

import pytest

from launcher.cli import main
from launcher.io import read_json
from launcher.slurm import devcluster as dc

pytestmark = pytest.mark.slurm


GPUS = 2


"""Stand-in GPUs per node in the binding test: the dev cluster's own count."""


@pytest.fixture(scope="module")
def gpu_cluster():
    """The dev cluster as every other test has it: 2 stand-in GPUs per node (gres), enough for two
    ranks, each with a device of its own, on one node and on two. Reconfiguring the nodes for
    more would restart slurmd twice (and stop running jobs) for no further check."""
    if os.geteuid() != 0:
        pytest.skip("the dev cluster needs root")
    cluster = dc.current() or dc.up(nodes=4, log=lambda _: None)
    if cluster.gpus_per_node != GPUS:
        cluster = dc.up(nodes=4, gpus_per_node=GPUS, log=lambda _: None)
    return cluster


@pytest.mark.parametrize("launch", ["srun", "torchrun"])
def test_one_rank_per_stand_in_gpu_on_one_and_two_nodes(launch, gpu_cluster, tmp_path, capsys):
    name = f"binding-{launch}"
    argv = [
        "sweep",
        "cluster=devcluster",
        f"cluster.gpus_per_node={GPUS}",
        "cluster.device=cpu",
        "sweep.nodes=[1,2]",
        "sweep.steps=6",
        "sweep.warmup_steps=2",
        f"cluster.launch={launch}",
        f"sweep.results_dir={tmp_path}",
        f"sweep.name={name}",
        "--quiet",
    ]
    rc = main(argv)
    out = capsys.readouterr().out
    trials = tmp_path / name / "trials"
    assert rc == 0, out + "".join(p.read_text() for p in sorted(trials.glob("*/*.log")))
    print(out)  # the table, for the report
    records = sorted((read_json(p) for p in trials.glob("*/record.json")), key=lambda r: r["trial"]["world_size"])
    assert [(r["status"], r["trial"]["world_size"]) for r in records] == [("completed", GPUS), ("completed", 2 * GPUS)]
    for nodes, record in zip((1, 2), records):
        tid = record["trial"]["trial_id"]
        bindings = record["rank_bindings"]
        print(
            tid,
            [
                (
                    b["rank"],
                    b["host"],
                    b["local_rank"],
                    b["cuda_visible_devices"],
                    b["gpu"],
                    b["cpu_affinity"],
                    b["threads"],
                )
                for b in bindings
            ],
        )
        assert [b["rank"] for b in bindings] == list(range(GPUS * nodes))
        pairs = {(b["host"], b["gpu"]) for b in bindings}
        assert len(pairs) == GPUS * nodes and None not in {gpu for _, gpu in pairs}
        assert len({b["host"] for b in bindings}) == nodes
        assert all(len(b["cpu_affinity"]) >= b["threads"] >= 1 for b in bindings)
        assert all(b["device_index"] is None and b["device_name"] is None for b in bindings)  # CPU trial
        assert all(b["cuda_visible_devices"] for b in bindings)  # set by Slurm's gres for the stand-ins
