"""`launcher`: command-line entry. Composes recipes with Hydra's override grammar.

Bad input exits 2 with one line and leaves nothing behind; torch is never imported here
(the payload runs in its own processes), so `--help` and planning stay fast.
"""

from __future__ import annotations

import argparse
import dataclasses
import shlex
import sys
from pathlib import Path
from typing import Sequence

from launcher import __version__
from launcher.results.policy import POLICIES
from launcher.config.errors import ConfigError

EXAMPLES = """examples:
  launcher sweep
  launcher sweep model=mlp sweep.world_sizes=[1,2] batch.micro=16 batch.accum=2 optim.lr_scaling=linear
  launcher sweep sweep.world_sizes=[2,4] parallel=ddp,fsdp,pipeline batch.accum=1,4
  launcher cluster up && launcher sweep cluster=devcluster sweep.nodes=[1,2,4]
  launcher sweep cluster=devcluster sweep.nodes=[1,2] --detach; launcher collect results/<sweep-id>
  launcher sweep --resume results/<sweep-id>
  launcher sweep sweep.search=adaptive sweep.world_sizes=[1,2,3,4] sweep.threshold=0.7
  launcher report results/<sweep-id>
  launcher plan model=gpt_1_3b parallel=fsdp cluster=example_gpu_site --gpus 8..16384
  launcher plan --from results/<sweep-id> --gpus 1..64 cluster.usd_per_device_hour=2
  launcher run cluster=devcluster cluster.nodes=2 --dry-run
  launcher analyze measured.csv --usd-per-gpu-hour 2.5 --token-budget 2e11
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

    def add(name: str, help_: str) -> argparse.ArgumentParser:
        return sub.add_parser(name, help=help_, epilog=EXAMPLES, formatter_class=argparse.RawDescriptionHelpFormatter)

    for name, help_ in (
        ("sweep", "run the recipe at every size and recommend one"),
        ("run", "run the recipe once (run.world_size locally, cluster.nodes on Slurm)"),
    ):
        sp = add(name, help_)
        sp.add_argument("overrides", nargs="*", help="Hydra overrides, e.g. model=mlp batch.micro=16")
        sp.add_argument("--recipes", help="recipes folder (default: $LAUNCHER_RECIPES or the bundled recipes/)")
        sp.add_argument("--quiet", action="store_true", help="no progress display")
        if name == "run":
            sp.add_argument("--dry-run", action="store_true", help="print (and write) what would run; start nothing")
            sp.add_argument("--requeue", action="store_true",
                            help="Slurm: on the USR1 warning checkpoint, requeue, and resume (sets run.requeue=true)")  # fmt: skip
        else:
            sp.add_argument("--detach", action="store_true", help="Slurm: return after submitting")
            sp.add_argument("--resume", metavar="SWEEP_DIR", help="carry on a sweep from its folder (no overrides)")
    for name, help_ in (("status", "where each trial of a sweep stands, and the source"),
                        ("collect", "ask the scheduler, rebuild and print a sweep's table"),
                        ("report", "rebuild a sweep's table, report.md and report.html (with plots) from its folder")):  # fmt: skip
        add(name, help_).add_argument("sweep_dir", help="results/<sweep-id>")
    pl = add("plan", "predict throughput, efficiency, $ and time per size; runs nothing")
    pl.add_argument("overrides", nargs="*", help="Hydra overrides (the recipe and cluster to plan)")
    pl.add_argument("--gpus", default="8..1024", help="sizes: 8..16384 (doubling), 8,16,24, or 64 (default 8..1024)")
    pl.add_argument("--from", dest="from_sweep", metavar="SWEEP_DIR", help="calibrate on this measured sweep")
    pl.add_argument("--assume-mfu", type=float, default=0.4, help="presets: achieved share of peak FLOP/s (default 0.4)")
    pl.add_argument("--recipes", help="recipes folder (default: $LAUNCHER_RECIPES or the bundled recipes/)")
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
    cl = add("cluster", "a real Slurm dev cluster on this machine (needs root)")
    cl.add_argument("action", choices=("up", "down", "status"))
    cl.add_argument("--nodes", type=int, default=4, help="compute nodes for `up` (default 4)")
    return p


def _run_as_sweep(cfg):
    """A single run is a one-trial sweep: same folder layout, record and table."""
    r = cfg.run
    sizes = {"nodes": [cfg.cluster.nodes]} if cfg.cluster.kind == "slurm" else {"world_sizes": [r.world_size]}
    sweep = dataclasses.replace(cfg.sweep, **sizes, steps=r.steps, warmup_steps=r.warmup_steps, repeats=1, pack=False,
                                search="grid")  # fmt: skip
    return dataclasses.replace(cfg, sweep=sweep)


def _run_trials(cfg):
    """The one trial of `launcher run`, checkpointing when asked to."""
    from launcher.trials.spec import plan_sweep

    r = cfg.run
    checkpoint = bool(r.checkpoint_every or r.requeue)
    return [dataclasses.replace(t, checkpoint=checkpoint, checkpoint_every=r.checkpoint_every) for t in plan_sweep(cfg)]


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    try:
        return _dispatch(args)
    except ConfigError as exc:
        print(f"launcher: error: {exc}", file=sys.stderr)
        return 2
    except Exception as exc:
        from launcher.slurm.commands import SlurmError

        if not isinstance(exc, SlurmError):
            raise
        # The scheduler said no (or is unreachable): one line; what was submitted is in the sweep folder.
        print(f"launcher: error: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("launcher: interrupted; finished trials and their table are kept in the sweep folder", file=sys.stderr)
        return 130


def _dispatch(args) -> int:
    from launcher.run import sweep as sw

    if args.command == "cluster":
        return _cluster(args)
    if args.command == "analyze":
        return _analyze(args)
    if args.command == "plan":
        return _plan(args)
    if args.command == "status":
        return _status(args.sweep_dir)
    if args.command in ("collect", "report"):
        result = sw.collect(args.sweep_dir, ask_scheduler=args.command == "collect")
        sw.show(result)
        return 0
    if args.command == "sweep" and args.resume:
        if args.overrides:
            raise ConfigError(f"--resume takes no overrides (got {' '.join(args.overrides)}); the sweep folder holds its config")
        result = sw.resume_sweep(args.resume, progress_bars=not args.quiet, detach=args.detach)
    else:
        if args.command == "run":
            from launcher.config.compose import compose_config

            overrides = [*args.overrides, *(["run.requeue=true"] if args.requeue else [])]
            cfg = _run_as_sweep(compose_config(overrides, args.recipes))
            if args.dry_run:
                return _dry_run(cfg, overrides)
            plan = sw.SweepPlan(cfg=cfg, items=[(t, cfg) for t in _run_trials(cfg)], skipped=[])
        else:
            plan = sw.plan_all(args.overrides, args.recipes)
        detach = getattr(args, "detach", False)
        if detach and plan.cfg.cluster.kind != "slurm":
            raise ConfigError("--detach needs a Slurm cluster (cluster=slurm or cluster=devcluster); local trials run here")
        if detach and plan.cfg.sweep.search == "adaptive":
            raise ConfigError("--detach with sweep.search=adaptive: the search picks each size from the last result, "
                              "so it must stay attached; use sweep.search=grid to detach")  # fmt: skip
        result = sw.run_sweep(plan, args.overrides, progress_bars=not args.quiet, detach=detach)
    if result is None:
        return 0
    sw.show(result)
    return 0 if (result.table["status"] == "completed").any() else 1


def _plan(args) -> int:
    from launcher.config.compose import compose_config
    from launcher.model.plan import from_presets_forecast, from_sweep_forecast, parse_gpus, sweep_overrides
    from launcher.report.report import print_table

    sizes = parse_gpus(args.gpus)
    if args.from_sweep:
        sweep_dir = Path(args.from_sweep)
        cfg = compose_config(sweep_overrides(sweep_dir, args.overrides), args.recipes)
        result = from_sweep_forecast(sweep_dir, cfg, sizes)
    else:
        cfg = compose_config(args.overrides, args.recipes)
        result = from_presets_forecast(cfg, sizes, assume_mfu=args.assume_mfu)
    print_table(result.table.dropna(axis=1, how="all"), result.recommendation, unit="GPU",
                title=f"plan: {cfg.model.name}, {cfg.parallel.layout}, {cfg.cluster.name} (predicted; nothing ran)",
                footer=f"model: {result.source}")  # fmt: skip
    return 0 if result.recommendation.world_size is not None else 1


def _analyze(args) -> int:
    from launcher.results.policy import Policy, Pricing
    from launcher.results.analyze import analyze, check_policy, read_table
    from launcher.report.report import print_table

    policy = Policy(name=args.policy, threshold=args.threshold, budget_device_hours=args.budget_gpu_hours,
                    budget_usd=args.budget_usd)  # fmt: skip
    pricing = Pricing(usd_per_device_hour=args.usd_per_gpu_hour, spot_discount=args.spot_discount,
                      token_budget=args.token_budget)  # fmt: skip
    for flag, value in (("--usd-per-gpu-hour", args.usd_per_gpu_hour), ("--token-budget", args.token_budget),
                        ("--budget-gpu-hours", args.budget_gpu_hours), ("--budget-usd", args.budget_usd)):  # fmt: skip
        if value is not None and not value > 0:
            raise ConfigError(f"{flag} {value:g} must be a positive number")
    check_policy(policy, pricing)
    result = analyze(read_table(args.table), policy, pricing, scaling=args.scaling)
    print_table(result.table.dropna(axis=1, how="all"), result.recommendation, title=f"{args.table} ({args.policy})", unit=result.unit)
    return 0 if result.recommendation.world_size is not None else 1


def _status(sweep_dir: str) -> int:
    from rich.table import Table
    from rich.text import Text

    from launcher.report.report import stdout_console
    from launcher.run.sweep import load_sweep

    path, cfg, trials = load_sweep(sweep_dir)
    outcomes = {}
    if cfg.cluster.kind == "slurm":
        from launcher.slurm.submit import refresh

        outcomes = refresh(path, cfg)
    table = Table(title=f"sweep {path.name} ({cfg.cluster.kind})")
    for col in ("trial", "nodes", "ranks", "job", "state", "source", "reason"):
        table.add_column(col)
    for t in trials:
        tdir = path / "trials" / t.trial_id
        doc = outcomes.get(t.trial_id)
        record = (tdir / "record.json").exists()
        if doc is None and (tdir / "outcome.json").exists():
            from launcher.io import read_json

            doc = read_json(tdir / "outcome.json")
        if doc is None:
            state, source, job, reason = ("completed" if record else "not started"), ("record" if record else "—"), "—", ""
        else:
            state = "completed" if record and doc.get("status") in (None, "completed") else doc.get("status", "failed")
            source, job, reason = doc.get("source", doc.get("executor", "")), doc.get("job", "—"), doc.get("reason") or ""
        table.add_row(*map(Text, (t.trial_id, str(t.nodes), str(t.world_size), job, state, source, reason)))
    stdout_console().print(table)
    return 0


def _cluster(args) -> int:
    from launcher.slurm import devcluster

    try:
        if args.action == "up":
            c = devcluster.up(nodes=args.nodes)
            print(devcluster.status(c.root))
        elif args.action == "down":
            devcluster.down()
        else:
            print(devcluster.status())
    except devcluster.DevClusterError as exc:
        print(f"launcher: error: {exc}", file=sys.stderr)
        return 2
    return 0


def _dry_run(cfg, overrides) -> int:
    (trial,) = _run_trials(cfg)
    if cfg.cluster.kind == "slurm":
        from launcher.slurm.submit import plan_jobs, write_scripts
        from launcher.run.sweep import create_sweep_dir

        sweep_dir = create_sweep_dir(cfg, [(trial, cfg)], overrides)
        (job,) = plan_jobs(cfg, sweep_dir, [trial])
        write_scripts(sweep_dir, [job])
        script = sweep_dir / "jobs" / f"{job.name}.sbatch"
        print(job.script, end="")
        print(f"# written to {script}; submit with: sbatch {shlex.quote(str(script))}", file=sys.stderr)
        return 0
    from launcher.run.local import payload_argv, rank_env

    print(f"# trial {trial.trial_id}: {trial.world_size} ranks, global batch {trial.global_batch}, lr {trial.lr:g}")
    for rank in range(trial.world_size):
        env = rank_env(rank, trial.world_size, 0, cfg.cluster.threads_per_rank)
        keys = ("MASTER_ADDR", "RANK", "WORLD_SIZE", "LOCAL_RANK", "OMP_NUM_THREADS")
        argv = payload_argv(Path("<trial-dir>/trial.json"), Path("<trial-dir>/record.json"), [])
        print(" ".join([*(f"{k}={shlex.quote(env[k])}" for k in keys), "MASTER_PORT=<free port>", *map(shlex.quote, argv)]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
