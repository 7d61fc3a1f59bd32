"""Executors: what runs a sweep's trials, behind one interface (base.Executor).

`executor_for(cfg)` is the one place that reads cluster.kind to choose: LocalExecutor runs a
trial's ranks as processes here; SlurmExecutor submits sbatch jobs and tracks them. The sweep
driver, `launcher run`, `status`, `collect`, `cancel`, repeats and the adaptive search call the
executor and never ask which one it is. Facts the layers below need before an executor exists
(validation, trial sizes, the memory budget) come from launcher/config/cluster_traits.py.

What an executor launches for each rank (or, under torchrun, each node) is a Payload
(launcher/trials/payload.py): argv words, extra environment and a launch mode, produced by
`payload_for(cfg)`. Both executors only spell its words: LocalExecutor as paths and this
interpreter (`Payload.here`), SlurmExecutor as shell words in the job script (render.py's
`words` filter: `"$dir/<file>"`, the nodes' interpreter, quoted text). A second payload (the
user's own command, `job=command`) plugs in as one more branch in `payload_for`, on the config's
choice of payload, returning its argv and env and launch (srun: one process per rank, the
rendezvous variables set; torchrun: one agent per node, handed `Payload.after_interpreter`);
neither executor changes. A launch mode not spelled yet (`none`: argv starts its own ranks;
torchrun on this machine, where run/local.py starts every rank itself today) is one more case
where the ranks are started (the job template's launch lines, run/local.py), not a new executor.
"""

from __future__ import annotations

import importlib

from launcher.config.schema import ClusterKind, LauncherConfig
from launcher.run.executor.base import Executor

EXECUTORS: dict[str, str] = {
    ClusterKind.local: "launcher.run.executor.local:LocalExecutor",
    ClusterKind.slurm: "launcher.run.executor.slurm:SlurmExecutor",
}
"""Every ClusterKind's executor, as `module:class` (a test checks none is missing): imported when chosen,
so a Slurm submission never loads the local executor's process and progress machinery (issue 30 item 11)."""


def executor_for(cfg: LauncherConfig) -> Executor:
    """The executor of `cfg`'s cluster: the only choice made on cluster.kind."""
    module, name = EXECUTORS[cfg.cluster.kind].split(":")
    return getattr(importlib.import_module(module), name)(cfg)
