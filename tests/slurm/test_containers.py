"""Every node-side step in a real container image (issue 29): pyxis + enroot, built from their
sources into the dev cluster by `launcher cluster up --containers`, and an image made here (Debian
bookworm, its python3 and CPU torch; no launcher, Hydra or OmegaConf in it). In it run the built-in
trainer at 1 and 2 nodes, a command trial with the meter under torchrun and under srun, a failing
command with its reason, and a requeued trial that resumes to the parameters of a run never
interrupted. Each record says which interpreter wrote it: the image's /usr/bin/python3, whose Python
version is the image's, not this host's.

What fails these: a step left on the host (the record step before this issue), the login node's venv
interpreter inside the image, a job side that imports omegaconf or hydra, a missing mount of the
launcher's package, the sweep folder or the submit folder, or a missing --container-workdir (the
examples' relative `examples/ddp_meter/train.py` is then not found).
"""

from __future__ import annotations

import json
import os
import platform
import time

import pandas as pd
import pytest
import torch

from launcher.cli import main
from launcher.io import read_json
from launcher.slurm.devcluster import containers
from launcher.slurm.devcluster.lifecycle import up
from tests.slurm.test_requeue_torchrun import resumed_row, submit_run, usr1_mid_run
from tests.support.command_job import PROGRAM
from tests.support.example_sweep import REPO, check_rows, sweep

pytestmark = pytest.mark.slurm

IMAGE_PYTHON = "/usr/bin/python3"


@pytest.fixture(scope="module")
def image(devcluster) -> tuple[str, dict]:
    """The dev cluster's image (.sqsh) and what is in it, pyxis loaded (`launcher cluster up --containers`,
    as the README's test command runs it: instant when it has)."""
    cluster = up(nodes=4, with_containers=True, log=lambda _: None)
    assert containers.enabled(cluster.root)
    info = containers.image_info(cluster.root)
    assert info["python"] != platform.python_version(), "the image's Python must differ from this host's to tell"
    return str(containers.image_path(cluster.root)), info


def _ran_in_image(record: dict, info: dict) -> None:
    versions = record["versions"]
    assert versions["executable"] == IMAGE_PYTHON, versions
    assert versions["python"] == info["python"], versions


def _name(kind: str) -> str:
    return f"ctr-{kind}-{os.getpid()}-{int(time.time())}"


def test_builtin_trainer_in_the_image_at_1_and_2_nodes(image, tmp_path, monkeypatch):
    """docs/containers.md's `launcher sweep --recipes my_recipes cluster=mysite sweep.nodes='[1,2,4]'`, with
    mysite the dev cluster and its image (1 and 2 nodes here)."""
    path, info = image
    recipes = tmp_path / "my_recipes"
    (recipes / "cluster").mkdir(parents=True)
    # container_reuse: the steps of a job share one named container per node, as on a site whose pyxis unpacks.
    (recipes / "cluster" / "mysite.yaml").write_text(
        f"defaults: [devcluster]\ncontainer_image: {path}\ncontainer_reuse: true\n"
    )
    monkeypatch.chdir(tmp_path)
    name = _name("builtin")
    args = ["sweep", "--recipes", str(recipes), "cluster=mysite", "sweep.nodes=[1,2]", "sweep.steps=12"]
    assert main([*args, "sweep.warmup_steps=2", f"sweep.results_dir={tmp_path}", f"sweep.name={name}", "--quiet"]) == 0
    rows = pd.read_csv(tmp_path / name / "results.csv")
    assert rows["status"].tolist() == ["completed", "completed"], rows["reason"].tolist()
    assert rows["nodes"].tolist() == [1, 2] and (rows["tokens_per_s"] > 0).all()
    for trial_id in rows["trial_id"]:
        record = read_json(tmp_path / name / "trials" / trial_id / "record.json")
        _ran_in_image(record, info)
        assert record["versions"]["torch"] == info["torch"]
        assert len(set(record["hosts"])) == record["trial"]["nodes"]


@pytest.mark.parametrize("launch", ["torchrun", "srun"])
def test_command_with_the_meter_in_the_image(image, launch, tmp_path, monkeypatch):
    """examples/ddp_meter (`from launcher import meter`: the mounted package) by its relative path from the
    submit folder, the repository root; each row equals what the program printed, its record in the image."""
    path, info = image
    monkeypatch.chdir(REPO)
    over = ["cluster=devcluster", "sweep.nodes=[1,2]", f"cluster.container_image={path}", f"job.launch={launch}"]
    sweep_dir = sweep("ddp_meter", tmp_path, _name(launch), *over)
    check_rows(sweep_dir, "ddp_meter")
    for tdir in sorted((sweep_dir / "trials").iterdir()):
        _ran_in_image(read_json(tdir / "record.json"), info)
    two_nodes = sorted((sweep_dir / "trials").iterdir())[1]
    probe = json.loads((two_nodes / "probe.json").read_text())  # written by the link probe, a step in the image
    assert len(set(probe["hosts"])) == 2 and probe["allreduce_of"] == "link_probe"


def test_failing_command_in_the_image_says_why(image, tmp_path, monkeypatch):
    path, info = image
    monkeypatch.chdir(REPO)
    argv = f"job.argv=[python,{PROGRAM.relative_to(REPO)},--fail,crash]"
    name = _name("fail")
    args = ["sweep", "cluster=devcluster", "job=command", argv, "job.launch=srun", "sweep.nodes=[1]"]
    rc = main([*args, f"cluster.container_image={path}", f"sweep.results_dir={tmp_path}", f"sweep.name={name}"])
    assert rc == 1  # no trial completed
    row = pd.read_csv(tmp_path / name / "results.csv").iloc[0]
    assert row["status"] == "failed"
    assert "the command exited with code 1; rank 0 log ends: ValueError: boom on rank 0" in row["reason"]
    _ran_in_image(read_json(tmp_path / name / "trials" / row["trial_id"] / "record.json"), info)


def test_requeued_trial_in_the_image_resumes_to_the_uninterrupted_parameters(
    image, devcluster, tmp_path, uninterrupted
):
    path, info = image
    env = devcluster.env()
    overrides = ["cluster.launch=torchrun", "cluster.nodes=2", f"cluster.container_image={path}"]
    cfg, trials, sweep_dir, tdir, job = submit_run(tmp_path, env, overrides)
    assert usr1_mid_run(env, tdir, job, "node*.attempt0.log") == "0"
    resumed_row(cfg, trials, sweep_dir, tdir)
    _ran_in_image(read_json(tdir / "record.json"), info)
    final = torch.load(sweep_dir / "params.pt")
    assert max((final[k] - uninterrupted[k]).abs().max().item() for k in uninterrupted) <= 1e-6
