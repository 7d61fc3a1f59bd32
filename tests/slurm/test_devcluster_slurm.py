"""The real cluster `launcher cluster up` starts (its config text: tests/unit/test_devcluster.py).

The tests start the cluster once per session (idempotent: a running one is reused in well under
a second) and leave it up for the rest of the suite."""

from __future__ import annotations

import os
import subprocess
import time

import pytest

from launcher.slurm import devcluster
from launcher.slurm.devcluster import conf
from tests.unit.test_devcluster import NODES4

pytestmark = pytest.mark.slurm


TERMINAL = {
    "COMPLETED",
    "FAILED",
    "CANCELLED",
    "TIMEOUT",
    "NODE_FAIL",
    "OUT_OF_MEMORY",
    "PREEMPTED",
    "BOOT_FAIL",
    "DEADLINE",
}


@pytest.fixture(scope="session")
def cluster() -> devcluster.DevCluster:
    if os.geteuid() != 0:
        pytest.skip("the dev cluster needs root")
    return devcluster.up(nodes=4, root=devcluster.DEFAULT_ROOT, log=lambda _: None)


def run(c: devcluster.DevCluster, *argv: str, check: bool = True) -> subprocess.CompletedProcess:
    r = subprocess.run(list(argv), check=False, capture_output=True, text=True, env=c.env(), timeout=60)
    if check and r.returncode != 0:
        raise AssertionError(f"{argv} exited {r.returncode}: {r.stderr}")
    return r


def submit(c: devcluster.DevCluster, *args: str) -> str:
    return run(c, "sbatch", "--parsable", *args).stdout.strip().split(";")[0]


def wait_done(c: devcluster.DevCluster, job: str, timeout: float = 60.0) -> str:
    """The job's final state from sacct (allocation line only)."""
    deadline = time.monotonic() + timeout
    state = "?"
    while time.monotonic() < deadline:
        out = run(c, "sacct", "--noheader", "--parsable2", "-X", "--format=State", "-j", job).stdout.split()
        state = out[0] if out else "?"
        if state.split()[0] in TERMINAL:
            return state
        time.sleep(0.3)
    raise AssertionError(f"job {job} still {state} after {timeout:.0f} s")


def test_up_is_idempotent_and_fast(cluster):
    t = time.monotonic()
    again = devcluster.up(nodes=4, root=cluster.root, log=lambda _: None)
    assert time.monotonic() - t < 1.0
    assert again == cluster == devcluster.current(cluster.root)
    assert cluster.nodes == NODES4 and cluster.partition == "debug"
    assert cluster.env()["SLURM_CONF"] == str(cluster.slurm_conf)
    text = devcluster.status(cluster.root)
    assert text.splitlines()[-1] == f"export SLURM_CONF={cluster.slurm_conf}"
    assert f"gpus per node: {cluster.gpus_per_node} (stand-ins" in text
    assert "cpu per node: " in text and "link: " in text  # the bed's limits, whatever they are now
    assert f"gpu:{cluster.gpus_per_node}" in text  # sinfo's GRES column
    assert "slurmctld" in text and "DEAD" not in text


def test_four_idle_nodes(cluster):
    want = [f"n{i} idle 2 4000 gpu:2 dev,cpu" for i in range(1, 5)]
    deadline = time.monotonic() + 60  # jobs of an earlier test may still be finishing
    while True:
        out = run(cluster, "sinfo", "--noheader", "--Node", "--format=%N %t %c %m %G %f").stdout
        if sorted(out.splitlines()) == want or time.monotonic() > deadline:
            break
        time.sleep(0.5)
    assert sorted(out.splitlines()) == want


def test_two_node_job_runs_on_distinct_hosts_and_resolves_names(cluster, tmp_path):
    out = tmp_path / "job.out"
    job = submit(
        cluster,
        "-N2",
        "--ntasks-per-node=1",
        f"--output={out}",
        "--wrap",
        "srun sh -c 'echo host=$(hostname) ip=$(hostname -I)'; getent hosts n1 n2",
    )
    assert wait_done(cluster, job) == "COMPLETED"
    text = out.read_text()
    rows = [dict(kv.split("=") for kv in ln.split()) for ln in text.splitlines() if ln.startswith("host=")]
    hosts = {r["host"] for r in rows}
    assert len(rows) == 2 and len(hosts) == 2 and hosts <= set(cluster.nodes)
    assert {r["ip"] for r in rows} == {conf.node_ip(h) for h in hosts}  # each node its own 10.77.0.x
    assert "10.77.0.11      n1" in text and "10.77.0.12      n2" in text
    steps = run(cluster, "sacct", "--noheader", "--parsable2", "--format=JobID,State", "-j", job).stdout.split()
    assert f"{job}|COMPLETED" in steps and f"{job}.batch|COMPLETED" in steps and f"{job}.0|COMPLETED" in steps


def test_job_on_n2_resolves_n1(cluster, tmp_path):
    out = tmp_path / "job.out"
    job = submit(cluster, "-w", "n2", f"--output={out}", "--wrap", "hostname; getent hosts n1")
    assert wait_done(cluster, job) == "COMPLETED"
    assert out.read_text().split() == ["n2", "10.77.0.11", "n1"]


def test_gpus_account_and_qos_pass_test_only(cluster):
    ok = run(cluster, "sbatch", "--test-only", "-N2", "--gres=gpu:2", "--account=dev", "--qos=normal", "--wrap", "true")
    assert "to start at" in ok.stderr
    too_many = run(cluster, "sbatch", "--test-only", "--gres=gpu:3", "--wrap", "true", check=False)
    assert too_many.returncode != 0
    bad_account = run(cluster, "sbatch", "--test-only", "--account=nope", "--wrap", "true", check=False)
    assert bad_account.returncode != 0 and "Invalid account" in bad_account.stderr


def test_failed_exit_code_reaches_sacct(cluster, tmp_path):
    job = submit(cluster, f"--output={tmp_path}/o", "--wrap", "exit 3")
    assert wait_done(cluster, job) == "FAILED"
    r = run(cluster, "sacct", "--noheader", "--parsable2", "-X", "--format=ExitCode", "-j", job)
    assert r.stdout.strip() == "3:0"
