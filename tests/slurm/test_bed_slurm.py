"""The bed on the real dev cluster: both limits (a CPU share per node, a shaped link between
nodes) put on the shared session cluster, a 2-node × 2-task sweep run on them, the link measured,
and the cluster put back as it was. The bed's pure rules: tests/unit/test_bed.py."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from launcher import cgroup
from launcher.cli import main
from launcher.slurm import devcluster as dc
from launcher.slurm.devcluster import bed, conf
from launcher.slurm.devcluster.limits import Limits
from launcher.slurm.devcluster.state import State

pytestmark = pytest.mark.slurm


RECEIVE = """
import socket, sys, time
s = socket.create_server((sys.argv[1], int(sys.argv[2])))
print("ready", flush=True)
c, _ = s.accept()
n, t0 = 0, None
while b := c.recv(1 << 20):
    t0 = t0 or time.perf_counter()
    n += len(b)
print(n / (time.perf_counter() - t0))
"""


SEND = """
import socket, sys
c = socket.create_connection((sys.argv[1], int(sys.argv[2])))
c.sendall(b"x" * int(sys.argv[3]))
c.close()
"""


def transfer_bytes_per_s(src: str, dst: str, nbytes: int, port: int = 17_001) -> float:
    """Bytes/s a bulk TCP transfer from node `src` to node `dst` delivers (payload, after headers)."""

    def inside(node: str, code: str, *args: str) -> list[str]:
        return ["nsenter", f"--net=/run/netns/{conf.netns_name(node)}", sys.executable, "-c", code, *args]

    ip = conf.node_ip(dst)
    with subprocess.Popen(inside(dst, RECEIVE, ip, str(port)), stdout=subprocess.PIPE, text=True) as rx:
        assert rx.stdout.readline().strip() == "ready"
        subprocess.run(inside(src, SEND, ip, str(port), str(nbytes)), check=True, timeout=60)
        return float(rx.stdout.readline())


def test_bed_in_place_then_a_2_node_x_2_task_sweep_on_it(devcluster, tmp_path):
    """`up --cpus-per-node 0.45 --link-rate 200mbit` on the running cluster: no daemon restarts,
    every node's slurmd in its cgroup, both ends of every link shaped; a sweep of 2 nodes × 2 ranks
    then runs on it with cpu_contention 1 and each rank's quota recorded; the link holds to its
    rate while loopback inside a node does not; and the cluster goes back to what it was."""
    before = dc.current(devcluster.root)
    assert before is not None
    st_before = State.from_json(json.loads((devcluster.root / "cluster.json").read_text()))
    bed_limits = Limits(cpus_per_node=0.45, link_rate_bit=200_000_000)
    try:
        c = dc.up(nodes=4, root=devcluster.root, log=lambda _: None, cpus_per_node=0.45, link_rate_bit=200_000_000)
        assert c.limits == bed_limits
        st = State.from_json(json.loads((c.root / "cluster.json").read_text()))
        assert st.procs == st_before.procs  # applied in place: the same daemons
        base = Path(st.cgroup_base)
        for n in c.nodes:
            assert str(st.procs[f"slurmd-{n}"].pid) in (base / n / "cgroup.procs").read_text().split()
            assert cgroup.level_quota(base / n, st.cgroup_version) == 0.45
            assert bed.shaped(conf.host_veth(n), None) == bed.shaped("eth0", conf.netns_name(n)) == 200_000_000
        text = dc.status(c.root)
        assert f"cpu per node: 0.45 (cgroup v{st.cgroup_version} " in text and f"in {base}/n*" in text
        assert "link: 200mbit (25 MB/s) tbf on each node's veth, both directions" in text

        assert (
            main(
                [
                    "sweep",
                    "cluster=devcluster",
                    "model=tiny_gpt",
                    "sweep.nodes=[2]",
                    "cluster.tasks_per_node=2",
                    "sweep.steps=4",
                    "sweep.warmup_steps=1",
                    f"sweep.results_dir={tmp_path}",
                    "sweep.name=bed",
                    "--quiet",
                ]
            )
            == 0
        )
        (record,) = [json.loads(p.read_text()) for p in (tmp_path / "bed" / "trials").glob("*/record.json")]
        assert record["status"] == "completed" and record["world_size"] == 4
        hosts = record["hosts"]
        assert len(set(hosts)) == 2 and sorted(hosts.count(h) for h in set(hosts)) == [2, 2]
        m = record["metrics"]
        assert m["cpu_quota_per_rank"] == [0.45] * 4 and m["cpu_contention"] == 1.0 and m["machines"] == 1

        # The shaper never lets more than the rate through; loopback inside a node is not shaped.
        between = transfer_bytes_per_s("n1", "n2", 8_000_000)
        within = transfer_bytes_per_s("n1", "n1", 8_000_000)
        print(f"bed link: n1→n2 {between / 1e6:.2f} MB/s (rate 25 MB/s), loopback in n1 {within / 1e6:.0f} MB/s")
        assert between <= 25e6 * 1.02 and within > 4 * 25e6
    finally:
        dc.up(
            nodes=4,
            root=devcluster.root,
            log=lambda _: None,
            cpus_per_node=before.limits.cpus_per_node,
            link_rate_bit=before.limits.link_rate_bit,
        )
    after = State.from_json(json.loads((devcluster.root / "cluster.json").read_text()))
    assert after.limits == before.limits and after.procs == st_before.procs
    if not before.limits.cpus_per_node:
        assert after.cgroup_base == "" and not (Path(st.cgroup_base)).exists()
    if not before.limits.link_rate_bit:
        assert all(bed.shaped(conf.host_veth(n), None) == 0 for n in devcluster.nodes)
