"""`python -m launcher.slurm.devcluster up|down|status [--nodes N] [--root DIR]`."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

from launcher.slurm.devcluster.cluster import DEFAULT_ROOT, DevClusterError, down, status, up


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        prog="python -m launcher.slurm.devcluster", description="Start, stop or show the dev Slurm cluster."
    )
    p.add_argument("action", choices=("up", "down", "status"))
    p.add_argument("--nodes", type=int, default=4, help="compute nodes for `up` (default 4)")
    p.add_argument("--root", type=Path, default=DEFAULT_ROOT, help=f"cluster folder (default {DEFAULT_ROOT})")
    args = p.parse_args(argv)
    try:
        if args.action == "up":
            c = up(nodes=args.nodes, root=args.root)
            print(f"export SLURM_CONF={c.slurm_conf}")
        elif args.action == "down":
            down(root=args.root)
        else:
            print(status(root=args.root))
    except DevClusterError as exc:
        print(f"launcher: error: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
