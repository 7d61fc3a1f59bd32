"""Asking the running cluster: Slurm's client commands with the cluster's SLURM_CONF, the nodes'
states, and waiting until every node is usable and accounting answers."""

from __future__ import annotations

import os
import subprocess
import time

from launcher.slurm.devcluster import conf, daemons
from launcher.slurm.devcluster.conf import Layout, Ports
from launcher.slurm.devcluster.errors import DevClusterError
from launcher.slurm.devcluster.install import program
from launcher.slurm.devcluster.state import State

PORTS = Ports()
# Nodes that work. Besides idle/alloc/mix: `comp` (a job's epilog is finishing) and `plnd`
# (idle, held by backfill for a pending job) are normal on a busy cluster, not a fault.
HEALTHY_STATES = ("idle", "alloc", "mix", "comp", "plnd")
NODES_TIMEOUT_S = 60.0


def client_env(layout: Layout) -> dict[str, str]:
    return dict(os.environ, SLURM_CONF=str(layout.slurm_conf))


def run(argv: list[str], layout: Layout, timeout: float = 20.0) -> subprocess.CompletedProcess:
    try:
        return subprocess.run(
            argv,
            check=False,
            capture_output=True,
            text=True,
            env=client_env(layout),
            timeout=timeout,
            stdin=subprocess.DEVNULL,
        )
    except subprocess.TimeoutExpired:
        return subprocess.CompletedProcess(argv, 124, "", f"timed out after {timeout:.0f} s")


def sinfo_states(layout: Layout) -> dict[str, str] | None:
    """Node → compact state (`idle`, `down*`, ...) or None if slurmctld does not answer."""
    r = run([program("sinfo"), "--noheader", "--Node", "--format=%N %t"], layout, timeout=10)
    if r.returncode != 0:
        return None
    out = {}
    for line in r.stdout.splitlines():
        parts = line.split()
        if len(parts) == 2:
            out[parts[0]] = parts[1]
    return out


def wait_ready(layout: Layout, st: State, names: tuple[str, ...]) -> None:
    ctld = st.procs["slurmctld"]
    daemons.wait_tcp(conf.CONTROLLER_IP, PORTS.ctld, "slurmctld", layout.log_file("slurmctld"), ctld)
    deadline = time.monotonic() + NODES_TIMEOUT_S
    resumed: set[str] = set()
    while True:
        states = sinfo_states(layout) or {}
        bad = {n: states.get(n, "?") for n in names if states.get(n) not in HEALTHY_STATES}
        if not bad:
            break
        for n, s in bad.items():
            # A node that answers but stays down/drained (after a failure test) needs a resume.
            if s in ("down", "drain") and n not in resumed:
                run([program("scontrol"), "update", f"nodename={n}", "state=resume"], layout)
                resumed.add(n)
        dead = [n for n in names if not daemons.alive(st.procs[f"slurmd-{n}"])]
        if dead or not daemons.alive(ctld) or time.monotonic() > deadline:
            if not daemons.alive(ctld):
                raise daemons.failure("slurmctld", layout.log_file("slurmctld"), ctld)
            n = dead[0] if dead else next(iter(bad))
            detail = ", ".join(f"{k}={v}" for k, v in bad.items())
            raise DevClusterError(
                f"node {n} did not come up ({detail}); read {layout.log / f'slurmd-{n}.log'} and "
                f"{layout.log_file('slurmctld')}"
            )
        time.sleep(0.1)
    while True:
        r = run([program("sacct"), "--noheader", "-X", "--format=JobID", "-j", "1"], layout)
        if r.returncode == 0:
            return
        if time.monotonic() > deadline:
            raise DevClusterError(f"sacct does not answer ({r.stderr.strip()}); read {layout.log_file('slurmdbd')}")
        time.sleep(0.2)
