"""What each kind of cluster means to the layers below the executors: one row per kind.

The executor (launcher/run/executor) is chosen once from the cluster's kind. Config validation, the
trial sizes and the memory budget run before any executor exists; they read these facts, never
the kind itself, so a new kind is one row here plus one executor.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from launcher.config.schema import ClusterConfig, ClusterKind


@dataclass(kw_only=True, frozen=True)
class ClusterTraits:
    ranks_here: bool
    """Every rank is a process on this machine: the ranks share its memory and GPUs, a trial is one
    machine however many ranks (sizes count ranks, never nodes, and stop at what one machine
    starts), and no CPU is bound to a rank."""
    batch_jobs: bool
    """Trials run as a batch scheduler's jobs, from a job script: they outlive the launcher
    (--detach, `launcher cancel`), one allocation can hold several (sweep.pack), a job can be
    requeued (--requeue), a node's memory is what the job asks for (cluster.mem), and the results
    folder appears on the script's #SBATCH lines."""


TRAITS: Mapping[str, ClusterTraits] = {
    ClusterKind.local: ClusterTraits(ranks_here=True, batch_jobs=False),
    ClusterKind.slurm: ClusterTraits(ranks_here=False, batch_jobs=True),
}
"""Every ClusterKind's row (a test checks none is missing)."""


def cluster_traits(c: ClusterConfig) -> ClusterTraits:
    """The facts of `c`'s kind."""
    return TRAITS[c.kind]


def recorded_traits(cluster: Mapping) -> ClusterTraits | None:
    """The facts of the kind a record's `config.cluster` names; None for a record without one."""
    return TRAITS.get(cluster.get("kind"))
