"""`launcher`: command-line entry. Composes recipes with Hydra's override grammar.

Bad input exits 2 with one line and leaves nothing behind; torch is never imported here
(the payload runs in its own processes), so `--help` and planning stay fast.
"""

from __future__ import annotations

import argparse
import dataclasses
import shlex
import sys
from typing import Sequence

from . import __version__
from .config.errors import ConfigError

EXAMPLES = """examples:
  launcher sweep
  launcher sweep model=mlp sweep.world_sizes=[1,2] batch.micro=16 batch.accum=2 optim.lr_scaling=linear
  launcher run run.world_size=2 run.steps=50
  launcher run run.world_size=2 --dry-run
overrides use Hydra's grammar: group=option (model=mlp), key=value (batch.micro=16), lists as [a,b]."""


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="launcher",
        description="Measure distributed training at several world sizes and recommend the efficient one.",
        epilog=EXAMPLES,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--version", action="version", version=f"launcher {__version__}")
    sub = p.add_subparsers(dest="command", required=True)
    for name, help_ in (
        ("sweep", "run the recipe at every sweep.world_sizes and recommend a size"),
        ("run", "run the recipe once at run.world_size"),
    ):
        sp = sub.add_parser(name, help=help_, epilog=EXAMPLES, formatter_class=argparse.RawDescriptionHelpFormatter)
        sp.add_argument("overrides", nargs="*", help="Hydra overrides, e.g. model=mlp batch.micro=16")
        sp.add_argument("--recipes", help="recipes folder (default: $LAUNCHER_RECIPES or the bundled recipes/)")
        sp.add_argument("--quiet", action="store_true", help="no progress bars")
        if name == "run":
            sp.add_argument("--dry-run", action="store_true", help="print what would run; run nothing")
    return p


def _run_as_sweep(cfg):
    """A single run is a one-trial sweep: same folder layout, record and table."""
    r = cfg.run
    sweep = dataclasses.replace(cfg.sweep, world_sizes=[r.world_size], steps=r.steps, warmup_steps=r.warmup_steps)
    return dataclasses.replace(cfg, sweep=sweep)


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    try:
        from .config.compose import compose_config

        cfg = compose_config(args.overrides, args.recipes)
        if args.command == "run":
            cfg = _run_as_sweep(cfg)
            if args.dry_run:
                return _dry_run(cfg)
        from .sweep import run_sweep

        result = run_sweep(cfg, args.overrides, progress_bars=not args.quiet)
    except ConfigError as exc:
        print(f"launcher: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("launcher: interrupted; finished trials and their table are kept in the sweep folder", file=sys.stderr)
        return 130
    return 0 if (result.table["status"] == "completed").any() else 1


def _dry_run(cfg) -> int:
    from .local import payload_argv, rank_env
    from .plan import plan_sweep

    (trial,) = plan_sweep(cfg)
    print(f"# trial {trial.trial_id}: {trial.world_size} ranks, global batch {trial.global_batch}, lr {trial.lr:g}")
    for rank in range(trial.world_size):
        env = rank_env(rank, trial.world_size, 0, cfg.cluster.threads_per_rank)
        keys = ("MASTER_ADDR", "RANK", "WORLD_SIZE", "LOCAL_RANK", "OMP_NUM_THREADS")
        argv = payload_argv("<trial-dir>/trial.json", "<trial-dir>/record.json", [])
        print(" ".join([*(f"{k}={shlex.quote(env[k])}" for k in keys), "MASTER_PORT=<free port>", *map(shlex.quote, argv)]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
