"""`launcher report <sweep>`: rebuild the table, report.md, report.html and the plots from a
sweep's folder alone (the scheduler is not asked: that is `launcher collect`)."""

from __future__ import annotations

import argparse

from launcher.run.sweep import collect, show


def main(args: argparse.Namespace) -> int:
    show(collect(args.sweep_dir, ask_scheduler=False))
    return 0
