"""`launcher`: the command line. Argument parsing and dispatch only: each verb's code lives in
a module named after it (VERBS), so `launcher/**/plan.py` is `launcher plan`.

Bad input exits 2 with one line and leaves nothing behind.
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys
from collections.abc import Sequence

from launcher import __version__
from launcher.config import show
from launcher.config.choices import POLICIES
from launcher.config.errors import ConfigError
from launcher.config.field_docs import group_text
from launcher.slurm.commands import SlurmError

# Verb → module holding its `main(args) -> int`. Imported on use: the training, Slurm and
# plotting stacks behind a verb cost seconds to import, and `launcher --help` should not wait.
VERBS = {
    "sweep": "launcher.run.sweep",
    "run": "launcher.run.run",
    "status": "launcher.run.status",
    "collect": "launcher.run.collect",
    "cancel": "launcher.run.cancel",
    "report": "launcher.run.report",
    "plan": "launcher.perf.plan",
    "profile": "launcher.run.profile",
    "analyze": "launcher.run.analyze",
    "cluster": "launcher.slurm.devcluster.cluster",
}

EXAMPLES = """examples:
  launcher sweep
  launcher sweep model=mlp 'sweep.world_sizes=[1,2]' batch.micro=16 batch.accum=2 optim.lr_scaling=linear
  launcher sweep 'sweep.world_sizes=[2,4]' parallel=ddp,fsdp,pipeline batch.accum=1,4
  launcher cluster up && launcher sweep cluster=devcluster 'sweep.nodes=[1,2,4]'
  launcher sweep cluster=devcluster 'sweep.nodes=[1,2]' --detach; launcher collect results/<sweep-id>
  launcher cancel results/<sweep-id>
  launcher sweep --resume results/<sweep-id>
  launcher sweep sweep.search=adaptive 'sweep.world_sizes=[1,2,3,4]' sweep.threshold=0.7
  launcher report results/<sweep-id>
  launcher plan model=gpt_1_3b parallel=fsdp cluster=example_gpu_site --gpus 8..16384 --output plan.csv
  launcher plan --from results/<sweep-id> --gpus 1..64 cluster.usd_per_device_hour=2
  launcher run cluster=devcluster cluster.nodes=2 --dry-run
  launcher run --from results/<sweep-id> run.steps=20000
  launcher plan --search model=gpt_1_3b cluster=example_gpu_site --gpus 8..64 --output plan.csv
  launcher run --from plan.json run.steps=20000
  launcher profile cluster=devcluster --nodes 2 --output site.json
  launcher plan model=gpt_1_3b cluster=devcluster cluster.profile=site.json --gpus 1..4
  launcher analyze measured.csv --usd-per-gpu-hour 2.5 --token-budget 2e11
overrides use Hydra's grammar: group=option (model=mlp), key=value (batch.micro=16), lists as '[a,b]'."""


def _recipe_arguments(p: argparse.ArgumentParser, help_: str) -> None:
    p.add_argument("overrides", nargs="*", help=help_)
    p.add_argument("--recipes", help="your recipes folder (default: $LAUNCHER_RECIPES or the bundled recipes/)")
    p.add_argument(
        "--cfg",
        action="store_true",
        help="print the composed, resolved config (one per swept combination) and exit; nothing runs",
    )
    p.add_argument("--info", action="store_true", help="list the config groups and their options, and exit")


def _sweep_and_run(add) -> None:
    sp = add("sweep", "run the recipe at every size and recommend one")
    _recipe_arguments(sp, "Hydra overrides, e.g. model=mlp batch.micro=16")
    sp.add_argument("--quiet", action="store_true", help="no progress display")
    sp.add_argument("--detach", action="store_true", help="Slurm: return after submitting")
    sp.add_argument("--resume", metavar="SWEEP_DIR", help="carry on a sweep from its folder (no overrides)")
    rp = add("run", "run the recipe once (run.world_size locally, cluster.nodes on Slurm)")
    _recipe_arguments(rp, "Hydra overrides, e.g. model=mlp batch.micro=16")
    rp.add_argument("--quiet", action="store_true", help="no progress display")
    rp.add_argument("--dry-run", action="store_true", help="print (and write) what would run; start nothing")
    rp.add_argument(
        "--requeue",
        action="store_true",
        help="Slurm: on the USR1 warning checkpoint, requeue, and resume (sets run.requeue=true)",
    )
    rp.add_argument(
        "--from",
        dest="from_sweep",
        metavar="SWEEP_DIR|PLAN",
        help="run the size and layout this sweep, or this plan saved by `plan --output` (plan.json), recommends, "
        "with its recipe and overrides (requeued on Slurm); overrides given here win",
    )


def _plan_and_analyze(add) -> None:
    pl = add("plan", "predict throughput, efficiency, $ and time per size; runs nothing")
    _recipe_arguments(pl, "Hydra overrides (the recipe and cluster to plan)")
    pl.add_argument("--gpus", default="8..1024", help="sizes: 8..16384 (doubling), 8,16,24, or 64 (default 8..1024)")
    pl.add_argument("--from", dest="from_sweep", metavar="SWEEP_DIR", help="calibrate on this measured sweep")
    pl.add_argument(
        "--assume-mfu",
        type=float,
        help="presets: share of peak FLOP/s the compute achieves (default: fitted on published runs "
        "for the device and precision, launcher/perf/preset_fit.json)",
    )
    pl.add_argument(
        "--output",
        metavar="PATH",
        help="also write the predicted table to PATH (.csv or .parquet), and save the plan beside it (PATH with "
        ".json) for launcher run --from",
    )
    pl.add_argument(
        "--search",
        action="store_true",
        help="choose layout, degrees, micro-batch, recompute and resharding per size under the memory limit "
        "(presets); --output then writes every candidate",
    )
    pl.add_argument(
        "--verify",
        type=int,
        metavar="K",
        help="with --search: run the top K candidates at the recommended size for real (the recipe's cluster: "
        "locally or on Slurm), show predicted vs measured and recommend what measured best",
    )
    an = add("analyze", "judge a scaling table measured anywhere (CSV or parquet)")
    an.add_argument("table", help="table with gpus (or world_size) and tokens_per_s, samples_per_s or hours")
    an.add_argument("--policy", choices=POLICIES, default="max_efficient", help="how to pick the size")
    an.add_argument("--threshold", type=float, default=0.8, help="max_efficient: efficiency to keep (default 0.8)")
    an.add_argument("--scaling", choices=("weak", "strong"), help="label of the efficiency (default: the table's)")
    an.add_argument("--usd-per-gpu-hour", type=float, help="price of one device-hour")
    an.add_argument("--spot-discount", type=float, default=0.0, help="fraction off the price, in [0, 1)")
    an.add_argument("--token-budget", type=float, help="tokens the run trains on (hours and $ to it)")
    an.add_argument("--budget-gpu-hours", type=float, help="fastest_within_budget: device-hours allowed")
    an.add_argument("--budget-usd", type=float, help="fastest_within_budget: dollars allowed")


def _profile(add) -> None:
    pr = add("profile", "measure the cluster's matmuls, memory and collectives into a profile `plan` reads")
    pr.add_argument("overrides", nargs="*", help="Hydra overrides naming the cluster, e.g. cluster=devcluster")
    pr.add_argument("--recipes", help="your recipes folder (default: $LAUNCHER_RECIPES or the bundled recipes/)")
    pr.add_argument(
        "--ranks", type=int, default=2, help="ranks, where the cluster runs them on this machine (default 2)"
    )
    pr.add_argument("--nodes", type=int, default=2, help="nodes of the job, on a batch cluster (default 2)")
    pr.add_argument("--output", metavar="PATH", help="also write the profile here (it stays in its results folder)")
    pr.add_argument("--quiet", action="store_true", help="no progress display")


def parser(argv: Sequence[str] | None = None) -> argparse.ArgumentParser:
    """The command line's parser. `argv` (None: every verb in full): the `cluster` verb's own arguments are
    added only where argv holds it, since defining them imports the dev cluster's code (~20 ms of every
    `launcher sweep --detach`, issue 30 item 11); a verb is a whole word, never abbreviated."""
    p = argparse.ArgumentParser(
        prog="launcher",
        description="Measure distributed training at several world sizes and recommend the efficient one.",
        epilog=EXAMPLES,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--version", action="version", version=f"launcher {__version__}")
    p.add_argument(
        "--info",
        nargs="?",
        const=True,
        metavar="GROUP",
        help="list the config groups and their options, or GROUP's fields with their docs (--info parallel; a "
        "top-level key's, --info precision), and exit",
    )
    p.add_argument("--recipes", help="with --info: your recipes folder (default: $LAUNCHER_RECIPES)")
    # Not required: `launcher --info` needs no verb; main() asks for one otherwise.
    sub = p.add_subparsers(dest="command")

    def add(name: str, help_: str) -> argparse.ArgumentParser:
        return sub.add_parser(name, help=help_, epilog=EXAMPLES, formatter_class=argparse.RawDescriptionHelpFormatter)

    _sweep_and_run(add)
    for name, help_ in (
        ("status", "where each trial of a sweep stands, and the source"),
        ("collect", "ask the scheduler, rebuild and print a sweep's table"),
        ("cancel", "Slurm: scancel a sweep's queued and running jobs; their trials read cancelled"),
        ("report", "rebuild a sweep's table, report.md and report.html (with plots) from its folder"),
    ):
        add(name, help_).add_argument("sweep_dir", help="results/<sweep-id>")
    _plan_and_analyze(add)
    _profile(add)
    cluster_parser = add("cluster", "a real Slurm dev cluster on this machine (needs root)")
    if argv is None or "cluster" in argv:
        from launcher.slurm.devcluster import cluster  # lazy: see above

        cluster.add_arguments(cluster_parser)
    return p


def main(argv: Sequence[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    p = parser(argv)
    args = p.parse_args(argv)
    if args.command is None and not args.info:
        p.error("a command is required (sweep, run, plan, …); see launcher --help")
    try:
        if isinstance(getattr(args, "info", None), str):
            print(group_text(args.info), end="")
            return 0
        if getattr(args, "info", False):
            print(show.groups_text(args.recipes))
            return 0
        if getattr(args, "cfg", False) and getattr(args, "from_sweep", None):
            raise ConfigError(
                f"--cfg with --from {args.from_sweep}: --cfg composes only the overrides given here, not the sweep's "
                "that --from reads; drop --cfg (launcher run --from … --dry-run prints what it would run and why)"
            )
        if getattr(args, "cfg", False):
            print(show.resolved_yamls(args.overrides, args.recipes), end="")
            return 0
        if args.command == "plan" and getattr(args, "verify", None) is not None:
            # lazy, as every verb: perf/ sits below run/, so --verify's sweep driver is handed down to it
            from launcher.run.verify import verify

            return importlib.import_module(VERBS["plan"]).main(args, verify=verify)
        return importlib.import_module(VERBS[args.command]).main(args)
    except ConfigError as exc:
        print(f"launcher: error: {exc}", file=sys.stderr)
        return 2
    except SlurmError as exc:
        # The scheduler said no (or is unreachable): one line; what was submitted is in the sweep folder.
        print(f"launcher: error: {exc}", file=sys.stderr)
        return 1
    except BrokenPipeError:
        # `launcher … | head`: the reader left; say nothing more (and nothing at exit's flush).
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 141
    except KeyboardInterrupt as exc:  # a sweep's says what did not finish and how to carry on (run/stopped.py)
        said = str(exc) or "interrupted; finished trials and their table are kept in the sweep folder"
        print(f"launcher: {said}", file=sys.stderr)
        return getattr(exc, "exit_code", 130)  # 130: Ctrl-C's 128 + SIGINT; SIGTERM's is 143


if __name__ == "__main__":
    sys.exit(main())
