"""The submitit peer of `launcher sweep ... --detach` for benchmarks/slurm_submit.py: the same 256
held jobs (4 node counts × 64 repeats) submitted the same way, one job per size and repeat round,
round by round (1,2,3,4,1,2,3,4,…), so that it is timed from the shell as the launcher is.

    SLURM_CONF=... python -m benchmarks.submitit_sweep FOLDER   (prints the job ids, one a line)
"""

from __future__ import annotations

import sys
from pathlib import Path

import submitit

NODES = (1, 2, 3, 4)
REPEATS = 64


def task(nodes: int, repeat: int) -> tuple[int, int]:
    """What each job would run (the jobs are held and cancelled, so never)."""
    return nodes, repeat


def main() -> None:
    folder = Path(sys.argv[1])
    executors = {}
    for nodes in NODES:
        ex = submitit.AutoExecutor(folder=folder / "%j", cluster="slurm")
        ex.update_parameters(
            slurm_partition="debug",
            nodes=nodes,
            tasks_per_node=1,
            timeout_min=10,
            slurm_additional_parameters={"hold": True},
        )
        executors[nodes] = ex
    ids = [executors[n].submit(task, n, r).job_id for r in range(REPEATS) for n in NODES]
    print("\n".join(ids))


if __name__ == "__main__":
    main()
