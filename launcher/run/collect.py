"""`launcher collect <sweep>`: ask the scheduler once (Slurm), rebuild the table and report
from the sweep folder, and print it; works from any later shell."""

from __future__ import annotations

import argparse

from launcher.run.sweep import collect, show


def main(args: argparse.Namespace) -> int:
    show(collect(args.sweep_dir, ask_scheduler=True))
    return 0
