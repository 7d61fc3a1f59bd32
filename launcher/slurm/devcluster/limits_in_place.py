"""The bed's limits on the running dev cluster: whether they are in place (each node's CPU quota,
slurmd inside its cgroup, the links' shaping, whole nodes per job), and putting them there in place,
with no restart, recording in the state file what was made so that `down` can undo it.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from launcher.slurm.devcluster import bed, conf, files, limits
from launcher.slurm.devcluster.conf import Layout
from launcher.slurm.devcluster.errors import DevClusterError
from launcher.slurm.devcluster.install import program
from launcher.slurm.devcluster.limits import Limits
from launcher.slurm.devcluster.ready import run
from launcher.slurm.devcluster.state import State, save


def exclusive(lim: Limits) -> bool:
    # A node's CPU share stands for a dedicated device: one job at a time on it, as with GPUs.
    return lim.cpus_per_node > 0


def set_exclusive(layout: Layout, names: tuple[str, ...], gpus: int, lim: Limits, with_containers: bool) -> None:
    """Whole nodes per job (or not) on the running controller, and in slurm.conf for its next start."""
    if files.write_configs(layout, names, gpus, exclusive(lim), with_containers):
        value = "EXCLUSIVE" if exclusive(lim) else "NO"
        r = run([program("scontrol"), "update", f"PartitionName={conf.PARTITION}", f"OverSubscribe={value}"], layout)
        if r.returncode != 0:
            raise DevClusterError(
                f"scontrol update PartitionName={conf.PARTITION} OverSubscribe={value} failed: {r.stderr.strip()}"
            )


def _slurmd_pids(st: State, names: tuple[str, ...]) -> dict[str, int]:
    return {n: st.procs[f"slurmd-{n}"].pid for n in names if f"slurmd-{n}" in st.procs}


def limits_current(st: State, names: tuple[str, ...], lim: Limits) -> bool:
    """The recorded limits are `lim` and the machine agrees (quota files, slurmd in its cgroup, qdiscs)."""
    if st.limits != lim or bool(st.cgroup_base) != bool(lim.cpus_per_node):
        return False
    cpu_ok = not lim.cpus_per_node or bed.cpu_in_place(
        names, lim.cpus_per_node, Path(st.cgroup_base), st.cgroup_version, _slurmd_pids(st, names)
    )
    return cpu_ok and bed.link_in_place(names, lim.link_rate_bit)


def apply_limits(st: State, layout: Layout, names: tuple[str, ...], lim: Limits, log: Callable[[str], None]) -> None:
    """Set, change or lift each node's CPU quota and link shaping on the running nodes, in place."""
    if lim.cpus_per_node:
        h = bed.hierarchy()
        base = Path(st.cgroup_base) if st.cgroup_base else bed.group_base(h)
        st.cgroup_base, st.cgroup_version = str(base), st.cgroup_version or h.version
        save(layout, st)  # recorded before it exists: `down` must find a half-made one
        bed.set_cpu(names, lim.cpus_per_node, base, st.cgroup_version)
    elif st.cgroup_base:
        bed.remove_cpu(Path(st.cgroup_base))
        st.cgroup_base, st.cgroup_version = "", 0
    bed.set_link(names, lim.link_rate_bit)
    if st.limits != lim:
        log(
            f"{limits.describe_cpus(lim.cpus_per_node, st.cgroup_version, bed.cores())}\n"
            f"{limits.describe_link(lim.link_rate_bit)}"
        )
    st.limits = lim
    save(layout, st)
