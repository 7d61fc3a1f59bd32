"""The submitit peer of `launcher sweep ... --detach` for benchmarks/slurm_submit.py: the same 256
held trials (4 node counts × 64 repeats) submitted as a script would with submitit, one `map_array`
per node count (4 arrays of 64, throttled `%4` as the launcher's sweep.array_throttle), so that it
is timed from the shell as the launcher is.

    SLURM_CONF=... python -m benchmarks.submitit_sweep FOLDER   (prints the array job ids, one a line)
"""

from __future__ import annotations

import sys
from pathlib import Path

import submitit

NODES = (1, 2, 3, 4)
REPEATS = 64
THROTTLE = 4  # the launcher's sweep.array_throttle default: both sides submit `--array=0-63%4`


def task(repeat: int) -> int:
    """What each array task would run (the jobs are held and cancelled, so never)."""
    return repeat


def main() -> None:
    folder = Path(sys.argv[1])
    ids = []
    for nodes in NODES:
        ex = submitit.AutoExecutor(folder=folder / "%j", cluster="slurm")
        ex.update_parameters(
            slurm_partition="debug",
            nodes=nodes,
            tasks_per_node=1,
            timeout_min=10,
            slurm_array_parallelism=THROTTLE,
            slurm_additional_parameters={"hold": True},
        )
        jobs = ex.map_array(task, range(REPEATS))
        ids.append(jobs[0].job_id.split("_", 1)[0])
    print("\n".join(ids))


if __name__ == "__main__":
    main()
