"""The nodes' network: a bridge on the host and one network namespace per node.

Only addresses this module creates are used (10.77.0.0/24 on the bridge and in the namespaces);
nothing is routed or NATed to the outside.
"""

from __future__ import annotations

import os
import signal
import subprocess
from pathlib import Path

from launcher.slurm.devcluster.conf import (
    BRIDGE,
    CONTROLLER_IP,
    PREFIX_LEN,
    Layout,
    host_veth,
    netns_name,
    node_ip,
)
from launcher.slurm.devcluster.install import program


class NetError(RuntimeError):
    pass


def _ip(*args: str, check: bool = True) -> subprocess.CompletedProcess:
    r = subprocess.run([program("ip"), *args], check=False, capture_output=True, text=True)
    if check and r.returncode != 0:
        raise NetError(f"`ip {' '.join(args)}` failed: {r.stderr.strip() or r.returncode}")
    return r


def link_exists(name: str) -> bool:
    return Path(f"/sys/class/net/{name}").exists()


def netns_exists(node: str) -> bool:
    return Path(f"/run/netns/{netns_name(node)}").exists()


def netns_path(node: str) -> Path:
    return Path(f"/run/netns/{netns_name(node)}")


def bridge_up() -> bool:
    """Create the bridge with the controller address. Returns True if this call created it."""
    created = False
    if not link_exists(BRIDGE):
        _ip("link", "add", BRIDGE, "type", "bridge")
        created = True
    addrs = _ip("-o", "-4", "addr", "show", "dev", BRIDGE).stdout
    if f"{CONTROLLER_IP}/{PREFIX_LEN}" not in addrs:
        _ip("addr", "add", f"{CONTROLLER_IP}/{PREFIX_LEN}", "dev", BRIDGE)
    _ip("link", "set", BRIDGE, "up")
    return created


def bridge_down() -> None:
    if link_exists(BRIDGE):
        _ip("link", "del", BRIDGE)


def node_up(node: str) -> bool:
    """Namespace, veth pair (host end on the bridge, `eth0` inside), address, default route.
    Returns True if this call created the namespace. Safe to repeat on a half-made node."""
    ns, veth = netns_name(node), host_veth(node)
    created = False
    if not netns_exists(node):
        _ip("netns", "add", ns)
        created = True
    inside = _ip("-n", ns, "-o", "link", "show").stdout
    if " eth0@" not in inside and " eth0:" not in inside:
        if link_exists(veth):  # a host end whose peer went away with an old namespace
            _ip("link", "del", veth)
        _ip("link", "add", veth, "type", "veth", "peer", "name", "eth0", "netns", ns)
    _ip("link", "set", veth, "master", BRIDGE)
    _ip("link", "set", veth, "up")
    _ip("-n", ns, "link", "set", "lo", "up")
    addrs = _ip("-n", ns, "-o", "-4", "addr", "show", "dev", "eth0").stdout
    if f"{node_ip(node)}/{PREFIX_LEN}" not in addrs:
        _ip("-n", ns, "addr", "add", f"{node_ip(node)}/{PREFIX_LEN}", "dev", "eth0")
    _ip("-n", ns, "link", "set", "eth0", "up")
    _ip("-n", ns, "route", "replace", "default", "via", CONTROLLER_IP)
    return created


def node_ok(node: str) -> bool:
    """Namespace present and the host end of its link up (a test may cut it to fake a node failure)."""
    if not netns_exists(node) or not link_exists(host_veth(node)):
        return False
    try:
        return Path(f"/sys/class/net/{host_veth(node)}/operstate").read_text().strip() in ("up", "unknown")
    except OSError:
        return False


def pids_in(node: str) -> list[int]:
    """Every process in the node's namespace: its slurmd, slurmstepds and the jobs' tasks."""
    if not netns_exists(node):
        return []
    r = _ip("netns", "pids", netns_name(node), check=False)
    return [int(x) for x in r.stdout.split() if x.isdigit()]


def kill_all_in(node: str) -> None:
    # Everything in this namespace was started by the node's slurmd, i.e. by `up`.
    for pid in pids_in(node):
        if pid != os.getpid():
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass


def node_down(node: str) -> None:
    kill_all_in(node)
    if netns_exists(node):
        _ip("netns", "del", netns_name(node))
    # The veth pair goes with the namespace once its last process is gone; a host end that
    # lingers (processes still exiting) is removed by hand.
    if link_exists(host_veth(node)):
        _ip("link", "del", host_veth(node), check=False)


def in_node_argv(node: str, layout: Layout, argv: list[str]) -> list[str]:
    """argv that runs `argv` as node `node`: its network namespace, its hostname, and the
    cluster's hosts and resolv.conf files (see `as_host_argv`)."""
    # `ip netns exec` would remount /sys, hiding /sys/fs/cgroup, and slurmd 22.05 dies; nsenter
    # only switches the network namespace.
    return [program("nsenter"), f"--net={netns_path(node)}", *as_host_argv(node, layout, argv)]


def as_host_argv(hostname: str, layout: Layout, argv: list[str]) -> list[str]:
    """argv that runs `argv` (in place: exec) with its own hostname and the cluster's
    /etc/hosts and /etc/resolv.conf, in a private mount and UTS namespace, so the host's own
    files and hostname stay as they are. Jobs inherit all of it from slurmd."""
    # Positional parameters carry the paths and argv through sh, so nothing of ours is quoted.
    script = (
        'mount --bind "$1" /etc/hosts && mount --bind "$2" /etc/resolv.conf && hostname "$3" && shift 3 && exec "$@"'
    )
    return [
        program("unshare"),
        "--mount",
        "--uts",
        "--propagation",
        "private",
        "sh",
        "-c",
        script,
        "sh",
        str(layout.hosts),
        str(layout.resolv_conf),
        hostname,
        *argv,
    ]
