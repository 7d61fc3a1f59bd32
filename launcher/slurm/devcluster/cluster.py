"""`launcher cluster up|down|status`: a real Slurm dev cluster on this machine (needs root)."""

from __future__ import annotations

import argparse
import sys

from launcher.slurm.devcluster.errors import DevClusterError
from launcher.slurm.devcluster.lifecycle import DEFAULT_ROOT, down, status, up


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("action", choices=("up", "down", "status"))
    p.add_argument("--nodes", type=int, default=4, help="compute nodes for `up` (default 4)")
    p.add_argument("--root", default=str(DEFAULT_ROOT), help=f"cluster folder (default {DEFAULT_ROOT})")
    p.add_argument("--gpus-per-node", type=int, default=None, metavar="N",
                   help="stand-in GPUs per node for `up` (Slurm gres backed by device files; jobs compute on "
                        "CPU); default: keep the running cluster's, 2 on a new one")  # fmt: skip


def main(args: argparse.Namespace) -> int:
    try:
        if args.action == "up":
            c = up(nodes=args.nodes, root=args.root, gpus_per_node=args.gpus_per_node)
            print(status(c.root))
        elif args.action == "down":
            down(root=args.root)
        else:
            print(status(root=args.root))
    except DevClusterError as exc:
        print(f"launcher: error: {exc}", file=sys.stderr)
        return 2
    return 0
