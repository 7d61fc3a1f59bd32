"""`up`, `down`, `status`, `current`: the dev cluster's life cycle.

The state file (`cluster.json` in the cluster folder) records every pid `up` started and every
namespace, bridge or cgroup it created; `down` acts on that record only. The bed's limits (a CPU
share per node, a link rate) are applied to a running cluster in place, with no restart
(`limits_in_place`, through `bed`).
"""

from __future__ import annotations

import os
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from launcher.slurm.devcluster import accounting, bed, conf, container_build, containers, daemons, files, limits, netns
from launcher.slurm.devcluster.conf import DEFAULT_ROOT, Layout
from launcher.slurm.devcluster.errors import DevClusterError
from launcher.slurm.devcluster.install import DAEMON_PATH, InstallError, ensure_packages, program
from launcher.slurm.devcluster.limits import Limits
from launcher.slurm.devcluster.limits_in_place import apply_limits, exclusive, limits_current, set_exclusive
from launcher.slurm.devcluster.ready import HEALTHY_STATES, run, sinfo_states, wait_ready
from launcher.slurm.devcluster.state import State, load, locked, save

PORTS = files.PORTS
DAEMON_TIMEOUT_S = 60.0
NOT_ROOT = (
    "launcher cluster up needs root: it installs Debian packages and creates network namespaces; "
    "run it as root, or use cluster=local"
)


@dataclass(kw_only=True, frozen=True)
class DevCluster:
    root: Path
    """The cluster folder."""
    slurm_conf: Path
    """`export SLURM_CONF=` this for sbatch, squeue, sacct, scontrol, sinfo."""
    nodes: tuple[str, ...]
    """Compute node names, ("n1", ..., "nN")."""
    partition: str
    """The default partition, "debug"."""
    gpus_per_node: int
    """Stand-in GPUs per node (gres `gpu`, device files in the cluster folder)."""
    limits: Limits = Limits()
    """Each node's CPU share and link rate (none by default: the nodes share the machine's cores)."""
    containers: bool = False
    """srun/sbatch take pyxis' --container-* options (`containers.image_path()` is the image to give them)."""

    def env(self) -> dict[str, str]:
        """A copy of os.environ with SLURM_CONF: what Slurm's client commands need."""
        return dict(os.environ, SLURM_CONF=str(self.slurm_conf))


def _cluster(layout: Layout, nodes: tuple[str, ...], gpus: int, lim: Limits, with_containers: bool) -> DevCluster:
    return DevCluster(
        root=layout.root,
        slurm_conf=layout.slurm_conf,
        nodes=nodes,
        partition=conf.PARTITION,
        gpus_per_node=gpus,
        limits=lim,
        containers=with_containers,
    )


def _daemon_env(layout: Layout, with_containers: bool) -> dict[str, str]:
    # Daemons get a small fixed environment, not the caller's (a test runner's variables
    # would otherwise leak into every job step's slurmstepd). With containers, enroot's folder
    # leads PATH: pyxis runs `enroot` from slurmstepd's PATH.
    path = (
        containers.daemon_path(containers.ContainerLayout(layout=layout), DAEMON_PATH)
        if with_containers
        else DAEMON_PATH
    )
    return {"PATH": path, "HOME": "/root", "LANG": "C.UTF-8", "SLURM_CONF": str(layout.slurm_conf)}


def _names(nodes: tuple[str, ...]) -> list[str]:
    return ["munged", "mariadb", "slurmdbd", "slurmctld", *(f"slurmd-{n}" for n in nodes)]


def _healthy(layout: Layout, st: State, nodes: tuple[str, ...], gpus: int, with_containers: bool) -> bool:
    if st.nodes != nodes or st.gpus_per_node != gpus or st.containers != with_containers:
        return False
    if with_containers and not container_build.current(containers.ContainerLayout(layout=layout)):
        return False
    if not all(name in st.procs and daemons.alive(st.procs[name]) for name in _names(nodes)):
        return False
    if not all(netns.node_ok(n) for n in nodes):
        return False
    if not files.configs_current(layout, nodes, gpus, exclusive(st.limits), with_containers):
        return False
    states = sinfo_states(layout)
    return states is not None and all(states.get(n) in HEALTHY_STATES for n in nodes)


# ---------------------------------------------------------------- up


def up(
    nodes: int = 4,
    root: Path = DEFAULT_ROOT,
    log: Callable[[str], None] = print,
    gpus_per_node: int | None = None,
    cpus_per_node: float | None = None,
    link_rate_bit: int | None = None,
    with_containers: bool | None = None,
) -> DevCluster:
    """Start (or repair, or resize) the dev cluster and wait until every node is idle and sacct answers.
    `gpus_per_node`: stand-in GPUs on every node; None keeps the running cluster's (2 on a new one),
    so a plain `up` from another test session never reconfigures, and restarts, a cluster in use.
    `cpus_per_node` (CPU quota per node, 0 = none) and `link_rate_bit` (tbf rate per node link,
    0 = unshaped) likewise keep the cluster's when None; new values are applied in place.
    `with_containers`: pyxis + enroot in the cluster and its image built (containers.py), cached in the
    cluster folder; True on a running cluster without them restarts slurmctld and the nodes (their jobs
    end); None keeps the cluster's (off on a new one)."""
    if os.geteuid() != 0:
        raise DevClusterError(NOT_ROOT)
    layout = Layout(root=Path(root))
    st = load(layout)
    try:
        names = conf.node_names(nodes)
        gpus = conf.check_gpus(st.gpus_per_node if gpus_per_node is None else gpus_per_node)
        cpus = st.limits.cpus_per_node if cpus_per_node is None else cpus_per_node
        lim = Limits(
            cpus_per_node=limits.check_cpus(cpus, len(names), bed.cores()),
            link_rate_bit=st.limits.link_rate_bit if link_rate_bit is None else link_rate_bit,
        )
        if lim.cpus_per_node:
            bed.hierarchy()  # no cpu controller: say so before anything starts
        want_containers = st.containers if with_containers is None else with_containers
        if want_containers:
            containers.check_root(layout.root)
    except ValueError as exc:
        raise DevClusterError(str(exc)) from None
    try:
        if layout.state_file.exists() and _healthy(layout, st, names, gpus, want_containers):
            if not limits_current(st, names, lim):
                with locked(layout):
                    apply_limits(load(layout), layout, names, lim, log)
                    set_exclusive(layout, names, gpus, lim, want_containers)
            return _cluster(layout, names, gpus, lim, want_containers)
        with locked(layout):
            return _up(layout, names, gpus, lim, log, want_containers)
    except (InstallError, netns.NetError, OSError, subprocess.SubprocessError) as exc:
        raise DevClusterError(f"{exc} (logs in {layout.log})") from None


def _up(
    layout: Layout,
    names: tuple[str, ...],
    gpus: int,
    lim: Limits,
    log: Callable[[str], None],
    with_containers: bool,
) -> DevCluster:
    t0 = time.monotonic()
    st = load(layout)
    # another `up` did it meanwhile
    if _healthy(layout, st, names, gpus, with_containers) and limits_current(st, names, lim):
        return _cluster(layout, names, gpus, lim, with_containers)
    ensure_packages(log, layout.log_file("apt"))
    files.make_dirs(layout, names, gpus)
    rebuilt = with_containers and container_build.ensure(
        containers.ContainerLayout(layout=layout), log, layout.log_file("containers")
    )
    changed = files.write_configs(layout, names, gpus, exclusive(lim), with_containers)
    if st.nodes and st.nodes != names:
        log(f"resizing the dev cluster from {len(st.nodes)} to {len(names)} nodes")
    if st.nodes and st.gpus_per_node != gpus:
        log(f"giving every node {gpus} stand-in GPUs (was {st.gpus_per_node}); running jobs are stopped")
    if st.nodes and st.containers != with_containers:
        log(f"{'loading' if with_containers else 'unloading'} pyxis: slurmctld and the nodes restart, running jobs end")
    st.gpus_per_node = gpus
    st.containers = with_containers
    env = _daemon_env(layout, with_containers)

    if layout.slurmdbd_conf in changed and "slurmdbd" in st.procs:
        daemons.stop(st.procs.pop("slurmdbd"))
    _start_munged(layout, st, env)
    _start_mariadb(layout, st, env)
    # Namespaces are made while MariaDB starts: both take a moment, neither needs the other.
    _network_up(layout, st, names)
    daemons.wait_unix(layout.mysql_socket, "mariadb", layout.log_file("mariadb"), st.procs["mariadb"])
    accounting.ensure_db_user(layout)
    # As the controller host: with NoInAddrAny it binds the address lnch-ctl resolves to, 10.77.0.1.
    _start(layout, st, "slurmdbd", netns.as_host_argv(conf.CONTROLLER, layout, [program("slurmdbd"), "-D"]), env)
    daemons.wait_tcp(conf.CONTROLLER_IP, PORTS.dbd, "slurmdbd", layout.log_file("slurmdbd"), st.procs["slurmdbd"])
    if not st.accounting:
        accounting.ensure_associations(layout, DAEMON_TIMEOUT_S)
        st.accounting = True
        save(layout, st)

    # Slurm 22.05 reads the node list only at start, and the hosts files are bound in at start:
    # any change restarts slurmctld and the nodes.
    stale = [n for n in st.nodes if n not in names]
    if (changed - {layout.slurmdbd_conf}) or stale or rebuilt:
        _stop_slurm(layout, st, st.nodes)
    for n in stale:
        _node_net_down(st, n)
    save(layout, st)
    # Before the nodes start: each slurmd starts inside its cgroup, the links are already shaped.
    apply_limits(st, layout, names, lim, log)

    ctld_argv = netns.as_host_argv(conf.CONTROLLER, layout, [program("slurmctld"), "-D"])
    _start(layout, st, "slurmctld", ctld_argv, env)
    for n in names:
        argv = netns.in_node_argv(n, layout, [program("slurmd"), "-D", "-N", n])
        if st.cgroup_base:
            argv = bed.enter_argv(Path(st.cgroup_base), n, argv)
        _start(layout, st, f"slurmd-{n}", argv, env)
    st.nodes = names
    save(layout, st)
    wait_ready(layout, st, names)
    log(f"dev cluster up: {len(names)} nodes ready in {time.monotonic() - t0:.1f} s (folder {layout.root})")
    return _cluster(layout, names, gpus, lim, with_containers)


def _start(layout: Layout, st: State, name: str, argv: list[str], env: dict[str, str]) -> None:
    old = st.procs.get(name)
    if old is not None and daemons.alive(old):
        return
    st.procs[name] = daemons.start(name, argv, log=layout.log / f"{name}.out", env=env)
    save(layout, st)


def _start_munged(layout: Layout, st: State, env: dict[str, str]) -> None:
    if not layout.munge_key.exists():
        r = subprocess.run(
            [program("mungekey"), "--create", f"--keyfile={layout.munge_key}"],
            check=False,
            capture_output=True,
            text=True,
        )
        if r.returncode != 0:
            raise DevClusterError(f"mungekey failed: {r.stderr.strip()}")
        layout.munge_key.chmod(0o600)
    old = st.procs.get("munged")
    if old is not None and daemons.alive(old):
        return
    # A socket left by a killed munged makes the next one refuse to start.
    layout.munge_socket.unlink(missing_ok=True)
    argv = [
        program("munged"),
        "--foreground",
        f"--socket={layout.munge_socket}",
        f"--key-file={layout.munge_key}",
        f"--pid-file={layout.run}/munged.pid",
        f"--log-file={layout.log}/munged.log",
        f"--seed-file={layout.munge_lib}/munged.seed",
    ]
    _start(layout, st, "munged", argv, env)
    daemons.wait_unix(layout.munge_socket, "munged", layout.log_file("munged"), st.procs["munged"])


def _start_mariadb(layout: Layout, st: State, env: dict[str, str]) -> None:
    old = st.procs.get("mariadb")
    if old is not None and daemons.alive(old):
        return
    accounting.init_datadir(layout)
    layout.mysql_socket.unlink(missing_ok=True)
    _start(layout, st, "mariadb", conf.mariadb_argv(layout, PORTS, program("mariadbd")), env)


def _network_up(layout: Layout, st: State, names: tuple[str, ...]) -> None:
    if netns.bridge_up():
        st.bridge = True
        save(layout, st)
    for n in names:
        if netns.node_up(n) and n not in st.netns:
            st.netns.append(n)
            save(layout, st)


def _node_net_down(st: State, n: str) -> None:
    if n in st.netns:
        netns.node_down(n)
        st.netns.remove(n)
    else:
        netns.kill_all_in(n)


def _stop_slurm(layout: Layout, st: State, nodes: tuple[str, ...]) -> None:
    """Stop the nodes' slurmd (and every process in their namespaces) and slurmctld."""
    node_procs = [st.procs[f"slurmd-{n}"] for n in nodes if f"slurmd-{n}" in st.procs]
    for p in node_procs:
        if daemons.alive(p):
            daemons.signal_pid(p.pid, 15)
    daemons.wait_dead(node_procs, 10.0)
    for n in nodes:
        # slurmstepd and the jobs' tasks outlive slurmd; they were started by this cluster.
        netns.kill_all_in(n)
        st.procs.pop(f"slurmd-{n}", None)
    if "slurmctld" in st.procs:
        daemons.stop(st.procs.pop("slurmctld"))
    save(layout, st)


# ---------------------------------------------------------------- down, status, current


def down(root: Path = DEFAULT_ROOT, log: Callable[[str], None] = print) -> None:
    """Stop what `up` started (by recorded pid) and remove the namespaces, bridge, cgroups and
    qdiscs it made. The limits stay recorded: a later `up` without flags applies them again."""
    layout = Layout(root=Path(root))
    if not layout.state_file.exists():
        log(f"no dev cluster recorded in {layout.root}; nothing to stop")
        return
    if os.geteuid() != 0:
        raise DevClusterError(
            "launcher cluster down needs root: it stops root's daemons and removes network namespaces"
        )
    with locked(layout):
        st = load(layout)
        nodes = tuple(sorted({*st.nodes, *st.netns, *(k[7:] for k in st.procs if k.startswith("slurmd-"))}))
        _stop_slurm(layout, st, nodes)
        if st.cgroup_base:
            bed.remove_cpu(Path(st.cgroup_base))
            st.cgroup_base, st.cgroup_version = "", 0
        bed.set_link(nodes, 0)
        save(layout, st)
        for name in ("slurmdbd", "mariadb", "munged"):
            if name in st.procs:
                daemons.stop(st.procs.pop(name), timeout=20.0)
                save(layout, st)
        for name in list(st.procs):  # anything recorded that the names above missed
            daemons.stop(st.procs.pop(name))
        for n in list(st.netns):
            _node_net_down(st, n)
        if st.bridge:
            netns.bridge_down()
            st.bridge = False
        st.nodes = ()
        save(layout, st)
    log(f"dev cluster down (its folder {layout.root} is kept)")


def status(root: Path = DEFAULT_ROOT) -> str:
    layout = Layout(root=Path(root))
    st = load(layout)
    if not st.procs:
        return f"no dev cluster running (folder {layout.root}); start one with `launcher cluster up`"
    lines = []
    for name in _names(st.nodes) + [k for k in st.procs if k not in _names(st.nodes)]:
        p = st.procs.get(name)
        lines.append(
            f"{name:<12} "
            f"{'not started' if p is None else f'pid {p.pid:<8} ' + ('alive' if daemons.alive(p) else 'DEAD')}"
        )
    # CPUs and GRES columns: what a job may ask of each node (the stand-in GPUs included).
    r = run([program("sinfo"), "--Node", "--format=%10N %9P %6t %5c %G"], layout, timeout=10)
    lines.append("")
    lines.append((r.stdout if r.returncode == 0 else f"sinfo failed: {r.stderr.strip()}\n").rstrip("\n"))
    lines.append(
        f"gpus per node: {st.gpus_per_node} (stand-ins: device files in {layout.fake_gpu_dir}; "
        "jobs compute on CPU, Slurm sets CUDA_VISIBLE_DEVICES)"
    )
    lines += _bed_lines(st)
    lines += containers.describe(containers.ContainerLayout(layout=layout), containers.enabled(layout.root))
    lines.append(f"export SLURM_CONF={layout.slurm_conf}")
    return "\n".join(lines)


def _bed_lines(st: State) -> list[str]:
    lim = st.limits
    cpu = limits.describe_cpus(lim.cpus_per_node, st.cgroup_version, bed.cores())
    out = [cpu + (f" in {st.cgroup_base}/n*" if st.cgroup_base else ""), limits.describe_link(lim.link_rate_bit)]
    if st.nodes and not limits_current(st, st.nodes, lim):
        out.append("NOT in place on every node (a node restarted by hand?): `launcher cluster up` applies them")
    return out


def current(root: Path = DEFAULT_ROOT) -> DevCluster | None:
    """The running cluster (all its recorded daemons alive), or None."""
    layout = Layout(root=Path(root))
    try:
        st = load(layout)
    except DevClusterError:
        return None
    if not st.nodes or not all(n in st.procs and daemons.alive(st.procs[n]) for n in _names(st.nodes)):
        return None
    return _cluster(layout, st.nodes, st.gpus_per_node, st.limits, st.containers)
