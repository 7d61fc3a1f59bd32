"""On the real dev cluster: sbatch jobs across nodes, sweeps that detach and resume, scancel."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch

from launcher.cli import main
from launcher.config.compose import compose_config
from launcher.io import atomic_write_json, read_json
from launcher.run.local import run_local
from launcher.run.sweep import create_sweep_dir
from launcher.slurm.commands import sbatch_test_only, slurm_env
from launcher.slurm.submit import job_requests, submit_jobs, write_scripts
from launcher.slurm.track import track
from launcher.trials.folder import trial_document
from launcher.trials.spec import make_trial, sweep_trials
from tests.support.render_cases import CASES, scripts
from tests.support.waiting import wait_for

pytestmark = pytest.mark.slurm

RUN = f"{os.getpid()}-{int(time.time())}"  # job names are per sweep: keep earlier runs' jobs out of view

DEV = ["cluster=devcluster"]
PARITY = ["optim=sgd", "optim.lr=0.05", "seed=3", "sweep.steps=5", "sweep.warmup_steps=1"]


@pytest.mark.parametrize("name", sorted(CASES))
def test_every_golden_script_passes_sbatch_test_only(devcluster, name, tmp_path):
    for i, (_, script) in enumerate(scripts(name, sweep_dir=tmp_path / "sweep")):
        path = tmp_path / f"{name}-{i}.sbatch"
        path.write_text(script)
        ok, said = sbatch_test_only(path, devcluster.env())
        assert ok, said
        assert "to start at" in said


def _final_params(tmp_path: Path, overrides: list[str]) -> tuple[dict, dict]:
    """Run one trial through sbatch; return (its record, its final parameters)."""
    cfg = compose_config(DEV + PARITY + overrides + [f"sweep.results_dir={tmp_path}"])
    trials = sweep_trials(cfg)
    sweep_dir = create_sweep_dir(cfg, [(t, cfg) for t in trials], overrides)
    params = sweep_dir / "params.pt"
    jobs = job_requests(cfg, sweep_dir, trials, payload_args=("--save-params", str(params)))
    write_scripts(sweep_dir, jobs)
    submit_jobs(sweep_dir, jobs, devcluster_env(cfg))
    track(sweep_dir, cfg, trials, progress_bars=False)
    (trial,) = trials
    record = read_json(sweep_dir / "trials" / trial.trial_id / "record.json")
    return record, torch.load(params)


def devcluster_env(cfg) -> dict[str, str]:
    return slurm_env(cfg.cluster.slurm_conf)


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
    """1 process, micro-batch 8, run locally: the reference for the multi-node runs."""
    tmp = tmp_path_factory.mktemp("ref")
    cfg = compose_config(PARITY + ["batch.micro=8"])
    trial = make_trial(cfg, index=0, world_size=1, steps=5, warmup_steps=1)
    atomic_write_json(tmp / "trial.json", trial_document(trial, cfg))
    assert run_local(tmp, world_size=1, threads=1, timeout_s=300, extra_args=["--save-params", str(tmp / "p.pt")]).ok
    return read_json(tmp / "record.json")["metrics"]["losses"], torch.load(tmp / "p.pt")


@pytest.mark.parametrize("nodes, per_node, micro", [(2, 1, 4), (2, 2, 2)], ids=["2nodes_x1", "2nodes_x2"])
def test_multinode_ddp_through_sbatch_equals_one_process(devcluster, reference, tmp_path, nodes, per_node, micro):
    record, params = _final_params(
        tmp_path, [f"sweep.nodes=[{nodes}]", f"cluster.tasks_per_node={per_node}", f"batch.micro={micro}"]
    )
    assert record["status"] == "completed"
    assert record["world_size"] == nodes * per_node and record["trial"]["global_batch"] == 8
    hosts = set(record["hosts"])
    assert len(hosts) == nodes and hosts <= set(devcluster.nodes)  # ranks really on two nodes
    assert record["hosts"].count(record["hosts"][0]) == per_node
    ref_losses, ref_params = reference
    np.testing.assert_allclose(record["metrics"]["losses"], ref_losses, rtol=1e-6, atol=1e-6)
    for name in ref_params:
        torch.testing.assert_close(params[name], ref_params[name], rtol=1e-6, atol=1e-6, msg=name)


def test_sweep_over_nodes_1_2_4(devcluster, tmp_path, capsys):
    assert (
        main(
            [
                "sweep",
                *DEV,
                "sweep.nodes=[1,2,4]",
                "sweep.steps=12",
                "sweep.warmup_steps=2",
                "model=mlp",
                f"sweep.results_dir={tmp_path}",
                f"sweep.name=nodes-{RUN}",
                "--quiet",
            ]
        )
        == 0
    )
    df = pd.read_csv(tmp_path / f"nodes-{RUN}" / "results.csv")
    assert df["world_size"].tolist() == [1, 2, 4] and df["nodes"].tolist() == [1, 2, 4]
    assert (df["status"] == "completed").all()
    hosts = [h.split(",") for h in df["hosts"]]
    assert [len(set(h)) for h in hosts] == [1, 2, 4]  # distinct hostnames, one per node
    assert set().union(*hosts) <= set(devcluster.nodes)
    assert df["efficiency"].iloc[0] == 1.0 and df["efficiency"].notna().all()
    assert "Recommended world size:" in capsys.readouterr().out
    # Each trial was its own sbatch job, accounted for by sacct.
    outcomes = [read_json(tmp_path / f"nodes-{RUN}" / "trials" / t / "outcome.json") for t in df["trial_id"]]
    assert [(o["source"], o["slurm_state"]) for o in outcomes] == [("sacct", "COMPLETED")] * 3
    assert len({o["job"] for o in outcomes}) == 3


def test_pack_runs_every_trial_as_a_step_of_one_allocation(devcluster, tmp_path):
    assert (
        main(
            [
                "sweep",
                *DEV,
                "sweep.nodes=[1,2,4]",
                "sweep.pack=true",
                "sweep.steps=8",
                "sweep.warmup_steps=2",
                "model=mlp",
                f"sweep.results_dir={tmp_path}",
                f"sweep.name=pack-{RUN}",
                "--quiet",
            ]
        )
        == 0
    )
    sweep_dir = tmp_path / f"pack-{RUN}"
    df = pd.read_csv(sweep_dir / "results.csv")
    assert df["status"].tolist() == ["completed"] * 3
    assert [len(set(h.split(","))) for h in df["hosts"]] == [1, 2, 4]
    subs = [read_json(sweep_dir / "trials" / t / "submission.json") for t in df["trial_id"]]
    assert len({s["job_id"] for s in subs}) == 1 and [s["pack_step"] for s in subs] == [0, 1, 2]
    assert len(list((sweep_dir / "jobs").glob("*.sbatch"))) == 1
    outcome = read_json(sweep_dir / "trials" / df["trial_id"].iloc[2] / "outcome.json")
    job = subs[0]["job_id"]
    steps = {s[0]: s[1] for s in outcome["steps"]}
    assert [steps.get(f"{job}.{i}") for i in range(3)] == ["COMPLETED"] * 3  # one srun step per trial


def test_repeats_of_a_size_are_one_array_job(devcluster, tmp_path):
    """Issue 30 item 11: one array per size holding all its repeats, sweep.array_throttle of them at once, so the
    sizes run side by side; each repeat is an array task with its own row (serialize_trials off: with it, jobs run
    one at a time and each round stays its own job, test_render.py::test_array_and_pack_shapes)."""
    assert (
        main(
            [
                "sweep",
                *DEV,
                "cluster.serialize_trials=false",
                "sweep.nodes=[1,2]",
                "sweep.repeats=2",
                "sweep.array_throttle=1",
                "sweep.steps=8",
                "sweep.warmup_steps=2",
                "model=mlp",
                f"sweep.results_dir={tmp_path}",
                f"sweep.name=arr-{RUN}",
                "--quiet",
            ]
        )
        == 0
    )
    sweep_dir = tmp_path / f"arr-{RUN}"
    df = pd.read_csv(sweep_dir / "results.csv")
    assert df["trial_id"].tolist() == ["000-ws1-r0", "001-ws2-r0", "002-ws1-r1", "003-ws2-r1"]
    assert df["repeat"].tolist() == [0, 0, 1, 1] and (df["status"] == "completed").all()
    records = [read_json(p) for p in sorted((sweep_dir / "jobs").glob("*.submitted.json"))]
    assert [(r["trials"], r["array"]) for r in records] == [
        (["000-ws1-r0", "002-ws1-r1"], True),
        (["001-ws2-r0", "003-ws2-r1"], True),
    ]
    for r in records:
        assert "#SBATCH --array=0-1%1\n" in (sweep_dir / r["script"]).read_text()
    subs = {t: read_json(sweep_dir / "trials" / t / "submission.json") for t in df["trial_id"]}
    ids = [r["job_id"] for r in records]
    assert {t: s["key"] for t, s in subs.items()} == {
        "000-ws1-r0": f"{ids[0]}_0",
        "002-ws1-r1": f"{ids[0]}_1",
        "001-ws2-r0": f"{ids[1]}_0",
        "003-ws2-r1": f"{ids[1]}_1",
    }
    outcomes = [read_json(sweep_dir / "trials" / t / "outcome.json") for t in df["trial_id"]]
    assert [(o["source"], o["job"], o["slurm_state"]) for o in outcomes] == [
        ("sacct", subs[t]["key"], "COMPLETED") for t in df["trial_id"]
    ]
    assert df["tokens_per_s_lo"].notna().all() and df["efficiency_hi"].notna().all()


def test_detach_then_collect(devcluster, tmp_path, capsys):
    sweep_dir = tmp_path / f"det-{RUN}"
    assert (
        main(
            [
                "sweep",
                *DEV,
                "sweep.nodes=[1,2]",
                "sweep.steps=8",
                "sweep.warmup_steps=2",
                "model=mlp",
                f"sweep.results_dir={tmp_path}",
                f"sweep.name=det-{RUN}",
                "--detach",
            ]
        )
        == 0
    )
    assert "detached; follow with: launcher status" in capsys.readouterr().out
    assert not (sweep_dir / "results.csv").exists()  # nothing waited for
    subs = [read_json(p) for p in sorted(sweep_dir.glob("trials/*/submission.json"))]
    assert len(subs) == 2

    def collected():
        assert main(["collect", str(sweep_dir)]) == 0
        return (pd.read_csv(sweep_dir / "results.csv")["status"] == "completed").all()

    wait_for(collected, 240, "both detached trials to complete", every=3)
    out = capsys.readouterr().out
    assert "Recommended world size:" in out
    assert main(["status", str(sweep_dir)]) == 0
    assert out.count("completed") >= 2


def test_scancel_is_recorded_as_cancelled_with_reason(devcluster, tmp_path):
    sweep_dir = tmp_path / f"cancel-{RUN}"
    assert (
        main(
            [
                "sweep",
                *DEV,
                "sweep.nodes=[1]",
                "sweep.steps=100000",
                f"sweep.results_dir={tmp_path}",
                f"sweep.name=cancel-{RUN}",
                "--detach",
            ]
        )
        == 0
    )
    (sub,) = [read_json(p) for p in sweep_dir.glob("trials/*/submission.json")]
    log = next(iter(sweep_dir.glob("trials/*"))) / "rank0.attempt0.log"
    wait_for(lambda: log.exists() and "step" in log.read_text(), 120, "the trial to start training")
    subprocess.run(["scancel", sub["job_id"]], env=devcluster.env(), check=True)

    def cancelled():
        main(["collect", str(sweep_dir)])
        row = pd.read_csv(sweep_dir / "results.csv").iloc[0].to_dict()
        return row if row["status"] == "cancelled" else None

    row = wait_for(cancelled, 60, "the job to show as cancelled", every=2)
    assert row["reason"] == "cancelled by uid 0 (scancel)"
    assert pd.isna(row["tokens_per_s"])


def test_killed_launcher_resumes_without_rerunning_done_trials(devcluster, tmp_path):
    sweep_dir = tmp_path / f"res-{RUN}"
    cmd = [
        sys.executable,
        "-m",
        "launcher",
        "sweep",
        *DEV,
        "sweep.nodes=[1,2]",
        "sweep.steps=40",
        "model=mlp",
        f"sweep.results_dir={tmp_path}",
        f"sweep.name=res-{RUN}",
        "--quiet",
    ]
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        # Kill it mid-sweep: the first trial finished, the second not yet.
        first = sweep_dir / "trials" / "000-ws1" / "record.json"
        wait_for(lambda: first.exists(), 180, "the first trial's record")
        assert not (sweep_dir / "trials" / "001-ws2" / "record.json").exists()
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait()
    before = {p.parent.name: read_json(p)["job_id"] for p in sweep_dir.glob("trials/*/submission.json")}
    first_record = first.read_text()

    assert main(["sweep", "--resume", str(sweep_dir), "--quiet"]) == 0
    after = {p.parent.name: read_json(p)["job_id"] for p in sweep_dir.glob("trials/*/submission.json")}
    assert after == before and len(after) == 2  # nothing submitted twice
    records = {
        t: read_json(p)["job_id"] for p in sweep_dir.glob("jobs/*.submitted.json") for t in read_json(p)["trials"]
    }
    assert records == after  # each trial's submission.json is derived from its job's fsync'd record
    assert first.read_text() == first_record  # the done trial was not re-run
    df = pd.read_csv(sweep_dir / "results.csv")
    assert df["status"].tolist() == ["completed", "completed"]
    names = subprocess.run(
        ["sacct", "--noheader", "-X", "--format=JobName%60", "--name", f"lnch-res-{RUN}"],
        env=devcluster.env(),
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    assert names.count(f"lnch-res-{RUN}") == 2
