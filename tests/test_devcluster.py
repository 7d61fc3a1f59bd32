"""The dev cluster: its config text (pure), and the real cluster `launcher cluster up` starts.

The `slurm` tests start the cluster once per session (idempotent: a running one is reused in
well under a second) and leave it up for the rest of the suite.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import time
from pathlib import Path

import pytest

from launcher.slurm import devcluster
from launcher.slurm.devcluster import cluster as cluster_verb
from launcher.slurm.devcluster import conf
from launcher.slurm.devcluster.__main__ import main as devcluster_main
from launcher.slurm.devcluster.state import State

ROOT = Path("/var/tmp/launcher-devcluster")
LAYOUT = conf.Layout(root=ROOT)
NODES4 = conf.node_names(4)
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


def lines(text: str) -> list[str]:
    return text.splitlines()


# ---------------------------------------------------------------- pure: conf.py


def test_node_names_and_addresses():
    assert NODES4 == ("n1", "n2", "n3", "n4")
    assert [conf.node_ip(n) for n in NODES4] == ["10.77.0.11", "10.77.0.12", "10.77.0.13", "10.77.0.14"]
    assert conf.netns_name("n3") == "lnch-n3"
    assert conf.host_veth("n3") == "lnch-vn3"
    assert len(conf.host_veth(f"n{conf.MAX_NODES}")) <= 15  # Linux interface names: 15 characters


@pytest.mark.parametrize("bad", [0, -1, conf.MAX_NODES + 1])
def test_node_count_out_of_range(bad):
    with pytest.raises(ValueError, match=f"nodes={bad}"):
        conf.node_names(bad)


def test_slurm_conf_key_lines():
    text = lines(conf.slurm_conf_text(LAYOUT, NODES4))
    sock = f"{ROOT}/munge/run/munge.socket.2"
    for want in [
        "ClusterName=devcluster",
        "SlurmctldHost=lnch-ctl(10.77.0.1)",
        "SlurmctldPort=16817",
        "CommunicationParameters=NoCtldInAddrAny",
        "SlurmdPort=16818",
        "AccountingStoragePort=16819",
        "AccountingStorageHost=10.77.0.1",
        "AccountingStorageType=accounting_storage/slurmdbd",
        f"AccountingStoragePass={sock}",
        f"AuthInfo=socket={sock},cred_expire=20",
        "AuthType=auth/munge",
        "CredType=cred/munge",
        "SlurmUser=root",
        f"StateSaveLocation={ROOT}/state",
        f"SlurmdSpoolDir={ROOT}/spool/slurmd-%n",
        f"SlurmdPidFile={ROOT}/run/slurmd-%n.pid",
        "KillWait=5",
        "SlurmdTimeout=20",
        "ReturnToService=2",
        "MpiDefault=none",
        "ProctrackType=proctrack/linuxproc",
        "TaskPlugin=task/none",
        "SelectType=select/cons_tres",
        "SelectTypeParameters=CR_Core",
        "JobAcctGatherType=jobacct_gather/linux",
        "JobCompType=jobcomp/filetxt",
        f"JobCompLoc={ROOT}/log/jobcomp.txt",
        "SlurmdParameters=config_overrides",
        "GresTypes=gpu",
        "PartitionName=debug Nodes=ALL Default=YES MaxTime=INFINITE State=UP",
    ]:
        assert want in text, want


def test_slurm_conf_one_line_per_node():
    text = conf.slurm_conf_text(LAYOUT, conf.node_names(2))
    node_lines = [ln for ln in lines(text) if ln.startswith("NodeName=")]
    assert node_lines == [
        "NodeName=n1 NodeAddr=10.77.0.11 NodeHostname=n1 CPUs=2 RealMemory=4000 Gres=gpu:2 Feature=dev,cpu "
        "State=UNKNOWN",
        "NodeName=n2 NodeAddr=10.77.0.12 NodeHostname=n2 CPUs=2 RealMemory=4000 Gres=gpu:2 Feature=dev,cpu "
        "State=UNKNOWN",
    ]


def test_ports_are_configurable_and_off_the_defaults():
    p = conf.Ports(ctld=20001, slurmd=20002, dbd=20003, mariadb=20004)
    slurm = lines(conf.slurm_conf_text(LAYOUT, NODES4, p))
    dbd = lines(conf.slurmdbd_conf_text(LAYOUT, "pw", p))
    assert {"SlurmctldPort=20001", "SlurmdPort=20002", "AccountingStoragePort=20003"} <= set(slurm)
    assert {"DbdPort=20003", "StoragePort=20004"} <= set(dbd)
    assert "--port=20004" in conf.mariadb_argv(LAYOUT, p)
    d = conf.Ports()
    # Slurm's own defaults (6817-6819) and MySQL's 3306 stay free for a system cluster.
    assert not {d.ctld, d.slurmd, d.dbd, d.mariadb} & {6817, 6818, 6819, 3306}


def test_slurmdbd_conf():
    text = lines(conf.slurmdbd_conf_text(LAYOUT, "s3cret"))
    for want in [
        "AuthType=auth/munge",
        f"AuthInfo=socket={ROOT}/munge/run/munge.socket.2",
        "DbdHost=localhost",
        "DbdPort=16819",
        "CommunicationParameters=NoInAddrAny",
        "SlurmUser=root",
        "StorageType=accounting_storage/mysql",
        "StorageHost=127.0.0.1",
        "StoragePort=16820",
        "StorageUser=slurm",
        "StoragePass=s3cret",
        "StorageLoc=slurm_acct_db",
    ]:
        assert want in text, want


def test_mariadb_stays_on_loopback_in_the_cluster_folder():
    argv = conf.mariadb_argv(LAYOUT)
    assert "--no-defaults" == argv[1]
    assert "--bind-address=127.0.0.1" in argv
    assert f"--datadir={ROOT}/mysql/data" in argv
    assert f"--socket={ROOT}/mysql/mysqld.sock" in argv


def test_gres_conf_fake_gpus():
    text = lines(conf.gres_conf_text(LAYOUT, conf.node_names(2)))
    assert "AutoDetect=off" in text
    assert f"NodeName=n1 Name=gpu Count=2 File={ROOT}/fakegpu/gpu[0-1]" in text
    assert f"NodeName=n2 Name=gpu Count=2 File={ROOT}/fakegpu/gpu[0-1]" in text
    assert conf.fake_gpu_files(LAYOUT) == [ROOT / "fakegpu/gpu0", ROOT / "fakegpu/gpu1"]


def test_stand_in_gpus_per_node():
    """`launcher cluster up --gpus-per-node 4`: every node 4 gres GPUs, each backed by a device file,
    and a CPU per GPU declared (config_overrides), so 4 ranks of 1 CPU each schedule on a node."""
    nodes = lines(conf.slurm_conf_text(LAYOUT, conf.node_names(2), gpus=4))
    assert (
        "NodeName=n2 NodeAddr=10.77.0.12 NodeHostname=n2 CPUs=4 RealMemory=4000 Gres=gpu:4 Feature=dev,cpu "
        "State=UNKNOWN"
    ) in nodes
    assert f"NodeName=n1 Name=gpu Count=4 File={ROOT}/fakegpu/gpu[0-3]" in lines(
        conf.gres_conf_text(LAYOUT, conf.node_names(1), gpus=4)
    )
    assert f"NodeName=n1 Name=gpu Count=1 File={ROOT}/fakegpu/gpu0" in lines(
        conf.gres_conf_text(LAYOUT, conf.node_names(1), gpus=1)
    )
    assert conf.fake_gpu_files(LAYOUT, 4) == [ROOT / f"fakegpu/gpu{i}" for i in range(4)]
    assert conf.node_cpus(1) == conf.node_cpus(2) == 2  # the default cluster's text is unchanged
    for bad in (0, conf.MAX_GPUS + 1):
        with pytest.raises(ValueError, match=f"gpus per node={bad}"):
            conf.check_gpus(bad)


def test_gpus_per_node_option_and_its_record():
    p = argparse.ArgumentParser()
    cluster_verb.add_arguments(p)
    assert p.parse_args(["up", "--gpus-per-node", "4"]).gpus_per_node == 4
    assert p.parse_args(["up"]).gpus_per_node is None  # keep the running cluster's count
    # The bed's limits likewise keep the running cluster's when left out (tests/test_bed.py has the rest).
    args = p.parse_args(["up"])
    assert (args.cpus_per_node, args.link_rate) == (None, None)
    args = p.parse_args(["up", "--cpus-per-node", "0.45", "--link-rate", "200mbit"])
    assert (args.cpus_per_node, args.link_rate) == ("0.45", "200mbit")
    assert State.from_json({"nodes": ["n1"]}).gpus_per_node == conf.NODE_GPUS  # a record from before the option
    assert State.from_json(State(gpus_per_node=4).to_json()).gpus_per_node == 4


def test_hosts_and_resolver_keep_names_inside():
    text = lines(conf.hosts_text(conf.node_names(3)))
    assert "10.77.0.1\tlnch-ctl" in text
    assert ["10.77.0.11\tn1", "10.77.0.12\tn2", "10.77.0.13\tn3"] == [ln for ln in text if "\tn" in ln]
    assert "127.0.0.1\tlocalhost" in text
    resolv = lines(conf.resolv_text())
    assert [ln for ln in resolv if ln.startswith("nameserver")] == ["nameserver 127.0.0.1"]


def test_not_root_is_one_clear_line(monkeypatch, tmp_path, capsys):
    monkeypatch.setattr(os, "geteuid", lambda: 1000)
    with pytest.raises(devcluster.DevClusterError) as exc:
        devcluster.up(root=tmp_path)
    assert str(exc.value) == (
        "launcher cluster up needs root: it installs Debian packages and creates network namespaces; "
        "run it as root, or use cluster=local"
    )
    assert devcluster_main(["up", "--root", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("launcher: error: launcher cluster up needs root") and err.count("\n") == 1


def test_nothing_recorded(tmp_path):
    assert devcluster.current(tmp_path) is None
    assert "no dev cluster running" in devcluster.status(tmp_path)
    devcluster.down(tmp_path, log=lambda _: None)  # nothing to stop: no error


# ---------------------------------------------------------------- the real cluster


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


@pytest.mark.slurm
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


@pytest.mark.slurm
def test_four_idle_nodes(cluster):
    want = [f"n{i} idle 2 4000 gpu:2 dev,cpu" for i in range(1, 5)]
    deadline = time.monotonic() + 60  # jobs of an earlier test may still be finishing
    while True:
        out = run(cluster, "sinfo", "--noheader", "--Node", "--format=%N %t %c %m %G %f").stdout
        if sorted(out.splitlines()) == want or time.monotonic() > deadline:
            break
        time.sleep(0.5)
    assert sorted(out.splitlines()) == want


@pytest.mark.slurm
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


@pytest.mark.slurm
def test_job_on_n2_resolves_n1(cluster, tmp_path):
    out = tmp_path / "job.out"
    job = submit(cluster, "-w", "n2", f"--output={out}", "--wrap", "hostname; getent hosts n1")
    assert wait_done(cluster, job) == "COMPLETED"
    assert out.read_text().split() == ["n2", "10.77.0.11", "n1"]


@pytest.mark.slurm
def test_gpus_account_and_qos_pass_test_only(cluster):
    ok = run(cluster, "sbatch", "--test-only", "-N2", "--gres=gpu:2", "--account=dev", "--qos=normal", "--wrap", "true")
    assert "to start at" in ok.stderr
    too_many = run(cluster, "sbatch", "--test-only", "--gres=gpu:3", "--wrap", "true", check=False)
    assert too_many.returncode != 0
    bad_account = run(cluster, "sbatch", "--test-only", "--account=nope", "--wrap", "true", check=False)
    assert bad_account.returncode != 0 and "Invalid account" in bad_account.stderr


@pytest.mark.slurm
def test_failed_exit_code_reaches_sacct(cluster, tmp_path):
    job = submit(cluster, f"--output={tmp_path}/o", "--wrap", "exit 3")
    assert wait_done(cluster, job) == "FAILED"
    r = run(cluster, "sacct", "--noheader", "--parsable2", "-X", "--format=ExitCode", "-j", job)
    assert r.stdout.strip() == "3:0"
