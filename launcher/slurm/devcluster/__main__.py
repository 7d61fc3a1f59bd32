"""`python -m launcher.slurm.devcluster up|down|status [--nodes N] [--gpus-per-node N] [--cpus-per-node F]
[--link-rate RATE] [--root DIR]`: the same as
`launcher cluster`, for machines where only the package (not its console script) is on PATH."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from launcher.slurm.devcluster import cluster


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        prog="python -m launcher.slurm.devcluster", description="Start, stop or show the dev Slurm cluster."
    )
    cluster.add_arguments(p)
    return cluster.main(p.parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
