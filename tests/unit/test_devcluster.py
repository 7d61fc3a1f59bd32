"""The dev cluster's config text (pure); the real cluster `launcher cluster up` starts:
tests/slurm/test_devcluster_slurm.py."""

from __future__ import annotations

import argparse
import os
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


def lines(text: str) -> list[str]:
    return text.splitlines()


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
    # The bed's limits likewise keep the running cluster's when left out (tests/unit/test_bed.py has the rest).
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
