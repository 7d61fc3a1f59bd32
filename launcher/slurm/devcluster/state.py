"""The cluster folder's record of what `up` started and created (`cluster.json`), and the lock
that keeps two `up`/`down` calls from interleaving."""

from __future__ import annotations

import fcntl
import json
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

from launcher.slurm.devcluster.conf import NODE_GPUS, Layout
from launcher.slurm.devcluster.daemons import Proc
from launcher.slurm.devcluster.errors import DevClusterError
from launcher.slurm.devcluster.limits import Limits


@dataclass(kw_only=True)
class State:
    nodes: tuple[str, ...] = ()
    """Nodes of the last `up`."""
    procs: dict[str, Proc] = field(default_factory=dict)
    """Daemons started by `up`, by name."""
    bridge: bool = False
    """True if `up` created the bridge."""
    netns: list[str] = field(default_factory=list)
    """Nodes whose namespace `up` created."""
    accounting: bool = False
    """Cluster, account and user are in the accounting database."""
    gpus_per_node: int = NODE_GPUS
    """Stand-in GPUs per node of the last `up` (a later `up` without --gpus-per-node keeps them)."""
    limits: Limits = field(default_factory=Limits)
    """CPU share and link rate per node of the last `up` (a later `up` without the flags keeps them)."""
    cgroup_base: str = ""
    """The folder `up` made for the nodes' cgroups (one per node inside); "" when none."""
    cgroup_version: int = 0
    """1 or 2: the cgroup hierarchy of `cgroup_base` (0 when none)."""
    containers: bool = False
    """The last `up` enabled containers (pyxis + enroot; a later `up` without --containers keeps them)."""

    def to_json(self) -> dict:
        return {
            "nodes": list(self.nodes),
            "procs": {k: p.to_json() for k, p in self.procs.items()},
            "bridge": self.bridge,
            "netns": self.netns,
            "accounting": self.accounting,
            "gpus_per_node": self.gpus_per_node,
            "cpus_per_node": self.limits.cpus_per_node,
            "link_rate_bit": self.limits.link_rate_bit,
            "cgroup_base": self.cgroup_base,
            "cgroup_version": self.cgroup_version,
            "containers": self.containers,
        }

    @classmethod
    def from_json(cls, d: dict) -> State:
        return cls(
            nodes=tuple(d.get("nodes", ())),
            procs={k: Proc.from_json(v) for k, v in d.get("procs", {}).items()},
            bridge=bool(d.get("bridge", False)),
            netns=list(d.get("netns", [])),
            accounting=bool(d.get("accounting", False)),
            gpus_per_node=int(d.get("gpus_per_node", NODE_GPUS)),
            limits=Limits(
                cpus_per_node=float(d.get("cpus_per_node", 0.0)), link_rate_bit=int(d.get("link_rate_bit", 0))
            ),
            cgroup_base=str(d.get("cgroup_base", "")),
            cgroup_version=int(d.get("cgroup_version", 0)),
            containers=bool(d.get("containers", False)),
        )


def load(layout: Layout) -> State:
    try:
        return State.from_json(json.loads(layout.state_file.read_text()))
    except FileNotFoundError:
        return State()
    except (ValueError, KeyError, TypeError) as exc:
        raise DevClusterError(f"unreadable state file {layout.state_file}: {exc}") from None


def save(layout: Layout, st: State) -> None:
    tmp = layout.state_file.with_suffix(".tmp")
    tmp.write_text(json.dumps(st.to_json(), indent=1) + "\n")
    tmp.replace(layout.state_file)


@contextmanager
def locked(layout: Layout) -> Iterator[None]:
    # Two `up`s at once (parallel test sessions) would start every daemon twice.
    layout.root.mkdir(parents=True, exist_ok=True)
    with open(layout.root / "lock", "w") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)
