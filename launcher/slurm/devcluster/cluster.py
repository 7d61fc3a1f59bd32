"""`launcher cluster up|down|status`: a real Slurm dev cluster on this machine (needs root)."""

from __future__ import annotations

import argparse
import sys

from launcher.slurm.devcluster import limits
from launcher.slurm.devcluster.errors import DevClusterError
from launcher.slurm.devcluster.lifecycle import DEFAULT_ROOT, down, status, up


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("action", choices=("up", "down", "status"))
    p.add_argument("--nodes", type=int, default=4, help="compute nodes for `up` (default 4)")
    p.add_argument("--root", default=str(DEFAULT_ROOT), help=f"cluster folder (default {DEFAULT_ROOT})")
    p.add_argument(
        "--gpus-per-node",
        type=int,
        default=None,
        metavar="N",
        help="stand-in GPUs per node for `up` (Slurm gres backed by device files; jobs compute on "
        "CPU); default: keep the running cluster's, 2 on a new one",
    )
    p.add_argument(
        "--cpus-per-node",
        default=None,
        metavar="F",
        help="`up`: a fixed CPU share per node, e.g. 0.45 (a cgroup CPU quota around its slurmd and every "
        "job step); the nodes together must leave 0.2 of the cores free; 0 or none removes it; "
        "default: keep the running cluster's (none on a new one)",
    )
    p.add_argument(
        "--link-rate",
        default=None,
        metavar="RATE",
        help="`up`: shape each node's link to RATE both ways (tc tbf; ranks on one node talk over "
        "loopback, unshaped): tc's units, 200mbit, 1gbit, 1500kbit (bits/s) or 25mbps (bytes/s); "
        "none removes it; default: keep the running cluster's (none on a new one)",
    )

    p.add_argument(
        "--containers",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="`up`: a real container runtime, NVIDIA's pyxis + enroot built from third_party/ against this "
        "Slurm, and an image (Debian, python3, the host's torch) for `srun --container-image=...`; cached in "
        "the cluster folder; loading it restarts slurmctld and the nodes; --no-containers unloads it; "
        "default: keep the running cluster's (off on a new one)",
    )


def main(args: argparse.Namespace) -> int:
    try:
        if args.action == "up":
            cpus = None if args.cpus_per_node is None else limits.parse_cpus(args.cpus_per_node)
            rate = None if args.link_rate is None else limits.parse_rate(args.link_rate)
            c = up(
                nodes=args.nodes,
                root=args.root,
                gpus_per_node=args.gpus_per_node,
                cpus_per_node=cpus,
                link_rate_bit=rate,
                with_containers=args.containers,
            )
            print(status(c.root))
        elif args.action == "down":
            down(root=args.root)
        else:
            print(status(root=args.root))
    except (DevClusterError, ValueError) as exc:
        print(f"launcher: error: {exc}", file=sys.stderr)
        return 2
    return 0
