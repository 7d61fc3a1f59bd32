"""The bed's limits on a running cluster: a cgroup with a CPU quota per node, and a tbf qdisc on
both ends of each node's veth. Values and arguments come from `limits`; this module writes them.

A node's cgroup holds its slurmd (started inside it, see `enter_argv`) and so every job step that
slurmd forks. A cgroup is independent of the network namespace, so changing the quota of a running
cluster, or putting one on it, needs no restart: every process in the node's namespace is moved in.
"""

from __future__ import annotations

import errno
import json
import os
import subprocess
import time
from pathlib import Path

from launcher import cgroup
from launcher.slurm.devcluster import limits, netns
from launcher.slurm.devcluster.conf import host_veth, netns_name
from launcher.slurm.devcluster.errors import DevClusterError
from launcher.slurm.devcluster.install import program

GROUP = "launcher-devcluster"
"""The folder that holds one cgroup per node (see `group_base`)."""
NO_CPU_CONTROLLER = (
    "--cpus-per-node needs the cgroup `cpu` controller: neither a cgroup v1 hierarchy mounted with `cpu` "
    "nor cgroup v2 with `cpu` in cgroup.controllers was found in /proc/self/mountinfo; mount one, "
    "or leave --cpus-per-node out"
)


def cores() -> int:
    """CPUs this process may run on: what the nodes' shares must fit in."""
    return len(os.sched_getaffinity(0))


def hierarchy() -> cgroup.CpuHierarchy:
    h = cgroup.cpu_hierarchy(Path("/proc/self/cgroup").read_text(), Path("/proc/self/mountinfo").read_text())
    if h is None:
        raise DevClusterError(NO_CPU_CONTROLLER)
    return h


def group_base(h: cgroup.CpuHierarchy) -> Path:
    """Where the nodes' cgroups go. v1: in the launcher's own cgroup. v2: at the top of the hierarchy,
    since v2 hands a controller to the children only of a cgroup with no processes of its own
    (the launcher's has the launcher), and a container's own cgroup may not have `cpu` at all."""
    return (h.dir() if h.version == 1 else h.mount) / GROUP


def node_dir(base: Path, node: str) -> Path:
    return base / node


def enter_argv(base: Path, node: str, argv: list[str]) -> list[str]:
    """argv that joins the node's cgroup, then execs `argv` (so slurmd starts inside it)."""
    procs = node_dir(base, node) / "cgroup.procs"
    return ["sh", "-c", 'echo $$ > "$1" && shift && exec "$@"', "sh", str(procs), *argv]


def _write(path: Path, text: str) -> None:
    try:
        path.write_text(text + "\n")
    except OSError as exc:
        # The kernel answers ENOENT for a controller the parent does not pass down.
        why = "the cpu controller is not available there" if path.name == "cgroup.subtree_control" else exc.strerror
        raise DevClusterError(f"cannot write {text!r} to {path}: {why}") from None


def _move(pids: list[int], procs: Path) -> None:
    for pid in pids:
        try:
            procs.write_text(f"{pid}\n")
        except OSError as exc:
            if exc.errno != errno.ESRCH:  # ESRCH: it exited meanwhile
                raise DevClusterError(f"cannot move pid {pid} into {procs.parent}: {exc.strerror}") from None


def set_cpu(nodes: tuple[str, ...], cpus: float, base: Path, version: int) -> None:
    """Give each node's cgroup the quota of `cpus` CPUs and move the node's processes into it."""
    if version == 2:
        # v2 passes a controller down only where each parent's subtree_control lists it.
        _write(base.parent / "cgroup.subtree_control", "+cpu")
    base.mkdir(exist_ok=True)
    if version == 2:
        _write(base / "cgroup.subtree_control", "+cpu")
    for name, text in limits.weight_files(version, len(nodes)).items():
        _write(base / name, text)
    for n in nodes:
        d = node_dir(base, n)
        d.mkdir(exist_ok=True)
        for name, text in {**limits.quota_files(version, cpus), **limits.weight_files(version)}.items():
            _write(d / name, text)
        _move(netns.pids_in(n), d / "cgroup.procs")
    for d in _node_dirs(base):
        if d.name not in nodes:  # a node the cluster was resized away from
            _remove_dir(d)


def remove_cpu(base: Path) -> None:
    """Move every process of the nodes' cgroups out (to the cgroup holding `base`) and remove them."""
    if not base.is_dir():
        return
    for d in _node_dirs(base):
        _remove_dir(d)
    base.rmdir()


def _node_dirs(base: Path) -> list[Path]:
    return [p for p in base.iterdir() if p.is_dir()]


def _remove_dir(d: Path, timeout: float = 5.0) -> None:
    deadline = time.monotonic() + timeout
    while True:
        _move([int(x) for x in cgroup.read_or_empty(d / "cgroup.procs").split()], d.parent.parent / "cgroup.procs")
        try:
            d.rmdir()
            return
        except OSError as exc:  # EBUSY while a moved or killed process finishes leaving
            if time.monotonic() > deadline:
                raise DevClusterError(f"cannot remove cgroup {d}: {exc.strerror}") from None
            time.sleep(0.05)


def cpu_in_place(nodes: tuple[str, ...], cpus: float, base: Path, version: int, slurmd_pids: dict[str, int]) -> bool:
    """The quota files read `cpus` and each node's slurmd is in its node's cgroup."""
    for n in nodes:
        d = node_dir(base, n)
        if cgroup.level_quota(d, version) != limits.cfs_quota_us(cpus) / limits.cfs_period_us(cpus):
            return False
        pid = slurmd_pids.get(n)
        if pid is None or str(pid) not in cgroup.read_or_empty(d / "cgroup.procs").split():
            return False
    return True


# ---------------------------------------------------------------- the link


def _ends(node: str) -> list[tuple[str, str | None]]:
    """(device, namespace) of both ends of the node's link: the host's veth shapes traffic to the
    node, the node's eth0 traffic from it."""
    return [(host_veth(node), None), ("eth0", netns_name(node))]


def _tc(argv: list[str]) -> subprocess.CompletedProcess:
    return subprocess.run(argv, check=False, capture_output=True, text=True, timeout=20)


def shaped(dev: str, ns: str | None) -> int:
    """Bits/s of the root tbf on a device (0: none, or the device is gone)."""
    where = ["-n", ns] if ns else []
    r = _tc([program("tc"), *where, "-j", "qdisc", "show", "dev", dev])
    try:
        return limits.shaped_at(json.loads(r.stdout)) if r.returncode == 0 and r.stdout.strip() else 0
    except ValueError:
        return 0


def set_link(nodes: tuple[str, ...], bits: int) -> None:
    """Shape every node's link at `bits`/s both ways (0: remove the shaping this module put there)."""
    for n in nodes:
        for dev, ns in _ends(n):
            if bits == 0 and not shaped(dev, ns):
                continue
            r = _tc(limits.tc_argv(program("tc"), dev, bits, ns))
            if r.returncode != 0:
                raise DevClusterError(f"`{' '.join(r.args)}` failed: {r.stderr.strip() or r.returncode}")


def link_in_place(nodes: tuple[str, ...], bits: int) -> bool:
    return all(shaped(dev, ns) == bits for n in nodes for dev, ns in _ends(n))
