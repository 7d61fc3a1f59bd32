"""The bed: a CPU share per dev-cluster node (cgroup quota) and a shaped link between nodes (tc tbf).

Pure rules on literal values: limits, the cgroup reader on literal /proc and cgroup files in a tmp
folder, cpu_contention. The real bed on the shared session cluster: tests/slurm/test_bed_slurm.py."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from launcher import cgroup
from launcher.cli import main
from launcher.slurm.devcluster import bed, conf, limits
from launcher.slurm.devcluster.limits import Limits
from launcher.slurm.devcluster.state import State
from launcher.train.measure import cpu_contention


@pytest.mark.parametrize(
    "text, cpus", [("0.45", 0.45), ("1", 1.0), ("0", 0.0), ("none", 0.0), ("OFF", 0.0), ("0.123456", 0.1235)]
)
def test_parse_cpus(text, cpus):
    assert limits.parse_cpus(text) == cpus


@pytest.mark.parametrize("bad", ["-1", "0.001", "abc", "nan", "inf", ""])
def test_parse_cpus_refuses_with_the_value_and_the_fix(bad):
    with pytest.raises(ValueError) as exc:
        limits.parse_cpus(bad)
    assert str(exc.value) == (
        f"--cpus-per-node {bad}: a node's CPU share must be a number ≥ 0.01 (e.g. 0.45), or 0 to remove the quota"
    )


def test_cpus_must_leave_the_reserve():
    assert limits.check_cpus(0.45, 4, 2) == 0.45  # 1.8 of 2 cores: exactly the 0.2 reserve left
    assert limits.check_cpus(0.0, 50, 2) == 0.0
    with pytest.raises(ValueError) as exc:
        limits.check_cpus(0.5, 4, 2)
    assert str(exc.value) == (
        "--cpus-per-node 0.5 × 4 nodes = 2.00 CPUs leaves 0.00 of this machine's 2 cores for slurmctld, slurmdbd, "
        "MariaDB and the launcher (needs 0.2); use --cpus-per-node ≤ 0.45 or fewer --nodes"
    )


def test_quota_and_weight_files_v1_and_v2():
    assert (limits.cfs_period_us(0.45), limits.cfs_quota_us(0.45)) == (5000, 2250)
    assert (limits.cfs_period_us(0.1), limits.cfs_quota_us(0.1)) == (10000, 1000)  # the kernel's 1 ms minimum quota
    assert (limits.cfs_period_us(1.5), limits.cfs_quota_us(1.5)) == (5000, 7500)
    assert limits.quota_files(1, 0.45) == {"cpu.cfs_period_us": "5000", "cpu.cfs_quota_us": "2250"}
    assert list(limits.quota_files(1, 0.45)) == ["cpu.cfs_period_us", "cpu.cfs_quota_us"]  # period first
    assert limits.quota_files(1, 0) == {"cpu.cfs_quota_us": "-1"}
    assert limits.quota_files(2, 0.45) == {"cpu.max": "2250 5000"}
    assert limits.quota_files(2, 0) == {"cpu.max": "max"}
    assert limits.weight_files(1) == {"cpu.shares": "10240"} and limits.weight_files(1, 4) == {"cpu.shares": "40960"}
    assert limits.weight_files(2) == {"cpu.weight": "1000"} and limits.weight_files(2, 40) == {"cpu.weight": "10000"}


def test_describe_cpus():
    assert limits.describe_cpus(0.45, 1, 2) == "cpu per node: 0.45 (cgroup v1 quota 2250/5000 µs)"
    assert limits.describe_cpus(0.45, 2, 2) == "cpu per node: 0.45 (cgroup v2 cpu.max 2250 5000)"
    assert limits.describe_cpus(0, 0, 2) == (
        "cpu per node: unlimited (the nodes share this machine's 2 cores; "
        "`launcher cluster up --cpus-per-node 0.45` gives each a fixed share)"
    )


@pytest.mark.parametrize(
    "text, bits",
    [
        ("200mbit", 200_000_000),
        ("1gbit", 10**9),
        ("1.5Gbit", 1_500_000_000),
        ("1500kbit", 1_500_000),
        ("25mbps", 200_000_000),
        ("200 mbit", 200_000_000),
        ("none", 0),
        ("0", 0),
        ("off", 0),
    ],
)
def test_parse_rate_in_tc_units(text, bits):
    assert limits.parse_rate(text) == bits


@pytest.mark.parametrize(
    "bad, why",
    [
        ("200", "not a rate"),
        ("200mb", "not a rate"),
        ("25MB/s", "not a rate"),
        ("fast", "not a rate"),
        ("999kbit", "the bed shapes links from 1mbit to 100gbit"),
        ("101gbit", "the bed shapes links from 1mbit to 100gbit"),
    ],
)
def test_parse_rate_refuses_with_the_units_it_takes(bad, why):
    with pytest.raises(ValueError) as exc:
        limits.parse_rate(bad)
    assert str(exc.value) == (
        f"--link-rate {bad}: {why}; use tc's units: 200mbit, 1gbit, 1500kbit (bits/s) "
        "or 25mbps (bytes/s), or none to remove the shaping"
    )


def test_rate_text_and_tc_arguments():
    assert [limits.rate_text(b) for b in (200_000_000, 10**9, 1_500_000_000, 1_500_000, 1_000_008)] == [
        "200mbit",
        "1gbit",
        "1500mbit",
        "1500kbit",
        "1000008bit",
    ]
    assert limits.tbf_args(200_000_000) == ["tbf", "rate", "200000000bit", "burst", "65536", "latency", "10ms"]
    assert limits.tbf_burst(10 * 10**9) == 1_250_000  # rate × 1 ms once that passes 64 KiB
    assert limits.tc_argv("tc", "lnch-vn1", 200_000_000) == [
        "tc",
        "qdisc",
        "replace",
        "dev",
        "lnch-vn1",
        "root",
        "tbf",
        "rate",
        "200000000bit",
        "burst",
        "65536",
        "latency",
        "10ms",
    ]
    assert limits.tc_argv("tc", "eth0", 10**9, "lnch-n2")[:7] == [
        "tc",
        "-n",
        "lnch-n2",
        "qdisc",
        "replace",
        "dev",
        "eth0",
    ]
    assert limits.tc_argv("tc", "eth0", 0, "lnch-n2") == ["tc", "-n", "lnch-n2", "qdisc", "del", "dev", "eth0", "root"]


def test_shaped_rate_read_back_from_tc_json():
    tbf = [
        {"kind": "tbf", "handle": "8006:", "root": True, "options": {"rate": 25000000, "burst": 65525, "lat": 10000}}
    ]
    assert limits.shaped_at(tbf) == 200_000_000
    assert limits.shaped_at([{"kind": "noqueue", "handle": "0:", "root": True, "options": {}}]) == 0
    assert limits.shaped_at([]) == 0
    assert limits.describe_link(200_000_000) == (
        "link: 200mbit (25 MB/s) tbf on each node's veth, both directions; ranks on one node talk over loopback, "
        "unshaped"
    )
    assert limits.describe_link(0).startswith("link: unshaped")


def test_exclusive_partition_and_the_state_record():
    text = conf.slurm_conf_text(conf.Layout(root=Path("/x")), ("n1",), exclusive=True).splitlines()
    assert text[-1] == "PartitionName=debug Nodes=ALL Default=YES MaxTime=INFINITE State=UP OverSubscribe=EXCLUSIVE"
    assert conf.slurm_conf_text(conf.Layout(root=Path("/x")), ("n1",)).splitlines()[-1].endswith("State=UP")
    st = State(limits=Limits(cpus_per_node=0.45, link_rate_bit=200_000_000), cgroup_base="/cg/x", cgroup_version=1)
    back = State.from_json(json.loads(json.dumps(st.to_json())))
    assert (back.limits, back.cgroup_base, back.cgroup_version) == (st.limits, "/cg/x", 1)
    assert State.from_json({"nodes": ["n1"]}).limits == Limits()  # a record from before the bed: no limits


def test_enter_argv_joins_the_cgroup_then_execs():
    argv = bed.enter_argv(Path("/sys/fs/cgroup/cpu/launcher-devcluster"), "n2", ["slurmd", "-D"])
    assert argv == [
        "sh",
        "-c",
        'echo $$ > "$1" && shift && exec "$@"',
        "sh",
        "/sys/fs/cgroup/cpu/launcher-devcluster/n2/cgroup.procs",
        "slurmd",
        "-D",
    ]


@pytest.mark.parametrize(
    "args, said",
    [
        (["--cpus-per-node", "-1"], "launcher: error: --cpus-per-node -1: a node's CPU share must be a number ≥ 0.01"),
        (["--link-rate", "25MB/s"], "launcher: error: --link-rate 25MB/s: not a rate; use tc's units"),
        (["--cpus-per-node", "0.6"], "launcher: error: --cpus-per-node 0.6 × 4 nodes = 2.40 CPUs leaves"),
    ],
)
def test_bad_flags_exit_2_with_one_line_and_create_nothing(args, said, tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(os, "geteuid", lambda: 0)
    monkeypatch.setattr(bed, "cores", lambda: 2)
    root = tmp_path / "cluster"
    assert main(["cluster", "up", "--root", str(root), *args]) == 2
    err = capsys.readouterr().err
    assert err.startswith(said) and err.count("\n") == 1
    assert not root.exists()


def test_no_cpu_controller_is_one_line_before_anything_starts(tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(os, "geteuid", lambda: 0)
    monkeypatch.setattr(cgroup, "cpu_hierarchy", lambda *a, **k: None)
    root = tmp_path / "cluster"
    assert main(["cluster", "up", "--root", str(root), "--nodes", "1", "--cpus-per-node", "0.45"]) == 2
    assert capsys.readouterr().err == f"launcher: error: {bed.NO_CPU_CONTROLLER}\n"
    assert not root.exists()


MOUNTINFO_V1 = """\
31 23 0:28 / /sys/fs/cgroup rw,relatime - tmpfs tmpfs rw,mode=755
32 31 0:29 / /sys/fs/cgroup/cpu rw,relatime - cgroup cgroup rw,cpu
33 31 0:30 / /sys/fs/cgroup/cpuacct rw,relatime - cgroup cgroup rw,cpuacct
41 31 0:38 / /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw
"""


CGROUP_V1 = "4:memory:/x\n2:cpuacct:/\n1:cpu:/launcher-devcluster/n1\n0::/\n"


MOUNTINFO_V2 = "25 1 0:23 / /sys/fs/cgroup rw,nosuid shared:4 - cgroup2 cgroup2 rw,nsdelegate\n"


def _files(root: Path, files: dict[str, str]) -> Path:
    for rel, text in files.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text)
    return root


def test_v1_quota_of_a_node_cgroup(tmp_path):
    root = _files(
        tmp_path,
        {
            "proc/self/cgroup": CGROUP_V1,
            "proc/self/mountinfo": MOUNTINFO_V1,
            "sys/fs/cgroup/cpu/cpu.cfs_quota_us": "-1\n",
            "sys/fs/cgroup/cpu/cpu.cfs_period_us": "100000\n",
            "sys/fs/cgroup/cpu/launcher-devcluster/cpu.cfs_quota_us": "-1\n",
            "sys/fs/cgroup/cpu/launcher-devcluster/cpu.cfs_period_us": "100000\n",
            "sys/fs/cgroup/cpu/launcher-devcluster/n1/cpu.cfs_quota_us": "2250\n",
            "sys/fs/cgroup/cpu/launcher-devcluster/n1/cpu.cfs_period_us": "5000\n",
        },
    )
    h = cgroup.cpu_hierarchy(CGROUP_V1, MOUNTINFO_V1, root)
    assert h == cgroup.CpuHierarchy(version=1, mount=Path("/sys/fs/cgroup/cpu"), path="/launcher-devcluster/n1")
    assert cgroup.own_cpu_quota(root) == cgroup.CpuQuota(cpus=0.45, group="v1:/launcher-devcluster/n1")


def test_v1_tightest_ancestor_sets_the_group(tmp_path):
    root = _files(
        tmp_path,
        {
            "proc/self/cgroup": CGROUP_V1,
            "proc/self/mountinfo": MOUNTINFO_V1,
            "sys/fs/cgroup/cpu/launcher-devcluster/cpu.cfs_quota_us": "30000\n",
            "sys/fs/cgroup/cpu/launcher-devcluster/cpu.cfs_period_us": "100000\n",
            "sys/fs/cgroup/cpu/launcher-devcluster/n1/cpu.cfs_quota_us": "-1\n",
            "sys/fs/cgroup/cpu/launcher-devcluster/n1/cpu.cfs_period_us": "100000\n",
        },
    )
    assert cgroup.own_cpu_quota(root) == cgroup.CpuQuota(cpus=0.3, group="v1:/launcher-devcluster")


def test_no_quota_anywhere(tmp_path):
    root = _files(
        tmp_path,
        {
            "proc/self/cgroup": "1:cpu:/\n0::/\n",
            "proc/self/mountinfo": MOUNTINFO_V1,
            "sys/fs/cgroup/cpu/cpu.cfs_quota_us": "-1\n",
            "sys/fs/cgroup/cpu/cpu.cfs_period_us": "100000\n",
        },
    )
    assert cgroup.own_cpu_quota(root) == cgroup.NO_QUOTA
    assert cgroup.own_cpu_quota(tmp_path / "nothing") == cgroup.NO_QUOTA  # no /proc at all


def test_v2_quota_and_a_container_mount_root(tmp_path):
    root = _files(
        tmp_path,
        {
            "proc/self/cgroup": "0::/launcher-devcluster/n3\n",
            "proc/self/mountinfo": MOUNTINFO_V2,
            "sys/fs/cgroup/cgroup.controllers": "cpuset cpu io memory pids\n",
            "sys/fs/cgroup/launcher-devcluster/cpu.max": "max 100000\n",
            "sys/fs/cgroup/launcher-devcluster/n3/cpu.max": "45000 100000\n",
        },
    )
    assert cgroup.own_cpu_quota(root) == cgroup.CpuQuota(cpus=0.45, group="v2:/launcher-devcluster/n3")
    # A v2 hierarchy without the cpu controller offers no quota.
    (root / "sys/fs/cgroup/cgroup.controllers").write_text("memory pids\n")
    assert cgroup.cpu_hierarchy("0::/launcher-devcluster/n3\n", MOUNTINFO_V2, root) is None
    # Without a cgroup namespace a container sees its own path below a mount of that path.
    info = "30 1 0:5 /docker/abc /sys/fs/cgroup/cpu rw - cgroup cgroup rw,cpu,cpuacct\n"
    h = cgroup.cpu_hierarchy("3:cpu,cpuacct:/docker/abc/job\n", info)
    assert (h.mount, h.path) == (Path("/sys/fs/cgroup/cpu"), "/job")


def test_mountinfo_escapes():
    info = r"30 1 0:5 / /sys/fs/cgroup/my\040cpu rw - cgroup cgroup rw,cpu" + "\n"
    assert cgroup.mounts(info) == [("cgroup", "/", "/sys/fs/cgroup/my cpu", {"rw", "cpu"})]


def _rank(machine: str, *, threads: int = 1, cpus: int = 2, quota: float | None = None, group: str | None = None):
    return {"machine": machine, "threads": threads, "cpus": cpus, "cpu_quota": quota, "cpu_group": group}


def test_contention_without_quotas_counts_threads():
    assert cpu_contention([_rank("m")] * 4) == 2.0  # 4 one-thread ranks on 2 cores
    assert cpu_contention([_rank("m")] * 2) == 1.0
    assert cpu_contention([_rank("m", threads=2)] * 3) == 3.0
    assert cpu_contention([_rank("a")] * 2 + [_rank("b")] * 3) == 1.5  # the busiest machine


def test_contention_with_a_quota_per_node_is_one():
    nodes = [_rank("m", quota=0.45, group=f"v1:/launcher-devcluster/n{i}") for i in range(1, 5)]
    assert cpu_contention(nodes) == 1.0  # 4 × 0.45 = 1.8 of 2 cores
    two_per_node = [_rank("m", quota=0.45, group=f"v1:/launcher-devcluster/n{i // 2}") for i in range(8)]
    assert cpu_contention(two_per_node) == 1.0  # two ranks share a group: still 0.45 per group
    assert cpu_contention([_rank("m", threads=2, quota=1.5, group=f"v1:/g{i}") for i in range(2)]) == 1.5
    # A group's ranks demand their threads up to its quota; ranks without one their threads.
    mixed = [
        _rank("m", quota=0.5, group="v2:/a"),
        _rank("m", threads=2, quota=1.5, group="v2:/b"),
        _rank("m"),
        _rank("m"),
    ]
    assert cpu_contention(mixed) == pytest.approx((0.5 + 1.5 + 2) / 2)


def test_where_the_node_cgroups_go():
    v1 = cgroup.CpuHierarchy(version=1, mount=Path("/sys/fs/cgroup/cpu"), path="/docker/x")
    v2 = cgroup.CpuHierarchy(version=2, mount=Path("/sys/fs/cgroup"), path="/process_api/x")
    assert bed.group_base(v1) == Path("/sys/fs/cgroup/cpu/docker/x/launcher-devcluster")
    assert bed.group_base(v2) == Path("/sys/fs/cgroup/launcher-devcluster")  # v2: at the top (no internal processes)
