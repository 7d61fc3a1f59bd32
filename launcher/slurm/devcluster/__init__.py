"""A real Slurm 22.05 cluster on this machine for development and CI: munged, MariaDB,
slurmdbd, slurmctld and N compute nodes, each node in its own network namespace with its own
address and hostname. `launcher cluster up|down|status` calls the functions here.

Modules: conf (pure config text and paths), netns (bridge and namespaces), daemons (start,
liveness and stop by pid), install (Debian packages), accounting (MariaDB, sacctmgr), state
(the record of what `up` started), ready (asking the running cluster), limits (pure rules of the
bed's CPU share and link rate), bed (applying them: cgroups and tc), limits_in_place (whether they
are in place on the running cluster, and putting them there), containers (pyxis + enroot and the
image, `--containers`: paths, config text, `image_path`, `image_info`, `enabled`), container_build
(building them into the cluster folder's cache), lifecycle (up, down, status), cluster (the
`launcher cluster` verb).
"""

from launcher.slurm.devcluster.errors import DevClusterError
from launcher.slurm.devcluster.lifecycle import DEFAULT_ROOT, DevCluster, current, down, status, up

__all__ = ["DEFAULT_ROOT", "DevCluster", "DevClusterError", "current", "down", "status", "up"]
