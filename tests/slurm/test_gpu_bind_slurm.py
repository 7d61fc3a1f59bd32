"""Slurm's per-task GPU binding on the dev cluster's stand-in GPUs (2 per node, gres): with
cluster.gpus_per_task=1 or cluster.gpu_bind=single:1 each task of a 2-rank trial sees one GPU of its own,
and the payload's binding takes it (a CPU trial records which). Pure checks and golden scripts:
tests/unit/test_gpu_binding_variants.py."""

from __future__ import annotations

import os

import pytest

from launcher.cli import main
from launcher.io import read_json
from launcher.slurm import devcluster as dc

pytestmark = pytest.mark.slurm


@pytest.fixture(scope="module")
def two_gpu_nodes():
    """The dev cluster as it runs, if it has 2 stand-in GPUs per node (never restarted here)."""
    if os.geteuid() != 0:
        pytest.skip("the dev cluster needs root")
    cluster = dc.current()
    if cluster is None or cluster.gpus_per_node != 2:
        pytest.skip("needs the dev cluster up with 2 stand-in GPUs per node")
    return cluster


@pytest.mark.parametrize("binding", ["cluster.gpus_per_task=1", "cluster.gpu_bind=single:1"])
def test_each_task_sees_and_takes_one_gpu_of_its_own(binding, two_gpu_nodes, tmp_path, capsys):
    name = "bind-" + binding.split(".")[1].split("=")[0]
    argv = ["sweep", "cluster=devcluster", "cluster.gpus_per_node=2", binding, "cluster.device=cpu"]
    argv += ["sweep.nodes=[1]", "sweep.steps=4", "sweep.warmup_steps=1", f"sweep.results_dir={tmp_path}"]
    rc = main([*argv, f"sweep.name={name}", "--quiet"])
    trials = tmp_path / name / "trials"
    assert rc == 0, capsys.readouterr().out + "".join(p.read_text() for p in sorted(trials.glob("*/*.log")))
    (record,) = [read_json(p) for p in trials.glob("*/record.json")]
    bindings = record["rank_bindings"]
    print([(b["rank"], b["local_rank"], b["cuda_visible_devices"], b["gpu"]) for b in bindings])
    assert [b["rank"] for b in bindings] == [0, 1]
    assert all("," not in b["cuda_visible_devices"] for b in bindings)  # one id per task
    assert [b["gpu"] for b in bindings] == [b["cuda_visible_devices"] for b in bindings]
    assert len({b["gpu"] for b in bindings}) == 2


# A user's program as most take their GPU (torchtitan, HF, Lightning): `cuda:{LOCAL_RANK}` among what it sees.
_TAKES_LOCAL_RANK = """import os, sys
seen = os.environ.get("CUDA_VISIBLE_DEVICES", "").split(",")
local = int(os.environ["LOCAL_RANK"])
print(f"LOCAL_RANK={local} CUDA_VISIBLE_DEVICES={','.join(seen)}", flush=True)
if local >= len(seen):
    sys.exit(f"cuda:{local} is not among the {len(seen)} GPU(s) this rank sees")
for _ in range(8):
    print("tok/s: 100.0", flush=True)
"""


@pytest.mark.parametrize(("launch", "seen"), [("torchrun", ["0,1", "0,1"]), ("srun", ["0", "1"])])
def test_a_command_with_gpus_per_task_takes_its_own_gpu_at_local_rank(launch, seen, two_gpu_nodes, tmp_path, capsys):
    """Issue 30 item 2: torchrun's one task per node used to inherit the job's --gpus-per-task=1 (rank 1 saw one GPU
    and no cuda:1); under srun each task sees its own GPU, so LOCAL_RANK is its index there (0), not SLURM_LOCALID."""
    program = tmp_path / "takes_local_rank.py"
    program.write_text(_TAKES_LOCAL_RANK)
    name = f"cmd-bind-{launch}"
    argv = ["sweep", "cluster=devcluster", "cluster.gpus_per_node=2", "cluster.gpus_per_task=1", "job=command"]
    argv += [f"job.argv=[python,{program}]", f"job.launch={launch}", "job.probe=false", "job.metrics=regex"]
    argv += ["job.pattern='tok/s: (?P<tokens_per_s>[0-9.]+)'", "sweep.nodes=[1]", f"sweep.results_dir={tmp_path}"]
    argv += ["sweep.steps=8", "sweep.warmup_steps=2"]
    main([*argv, f"sweep.name={name}", "--quiet"])
    (trial,) = (tmp_path / name / "trials").iterdir()
    logs = [(trial / f"rank{r}.attempt0.log").read_text().splitlines()[0] for r in (0, 1)]
    expected = [0, 1] if launch == "torchrun" else [0, 0]
    assert logs == [f"LOCAL_RANK={lr} CUDA_VISIBLE_DEVICES={ids}" for lr, ids in zip(expected, seen, strict=True)]
    record = read_json(trial / "record.json")
    assert record["status"] == "completed", capsys.readouterr().out
