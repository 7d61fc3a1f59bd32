"""`launcher profile`: measure the cluster's device and links once, for `launcher plan cluster.profile=PATH`.

One short job of the recipe's cluster (cluster=local: `--ranks` processes here; Slurm: one sbatch job of
`--nodes` nodes, through the same executor, job script and tracking as a sweep's trial) runs
launcher/train/profile_node.py on every rank: matmuls over shapes and dtypes, a large copy, and
all-reduce / all-gather / reduce-scatter / all-to-all within a node and across nodes. Its folder is a
one-trial sweep folder (results/profile-…); the profile is copied to `--output` and summed up in a table.
"""

from __future__ import annotations

import argparse
import dataclasses
import shutil
import sys
import time
from pathlib import Path

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from launcher.config.compose import compose_config
from launcher.config.errors import ConfigError
from launcher.config.schema import LauncherConfig
from launcher.io import read_json
from launcher.perf import site_profile
from launcher.run import sweep as sw
from launcher.run.executor import executor_for
from launcher.train import profile_plan
from launcher.trials.folder import trial_dir
from launcher.trials.payload import profile_payload
from launcher.trials.spec import Trial, make_trial, sweep_sizes


def device_type(cfg: LauncherConfig) -> str:
    """The device the job will measure, for the bar's length: a GPU where the config asks for one."""
    c = cfg.cluster
    return "cuda" if c.device == "cuda" or c.gpus_per_node or c.gpus_per_task else "cpu"


def profile_config(cfg: LauncherConfig, ranks: int, nodes: int) -> tuple[LauncherConfig, Trial]:
    """The one-trial sweep that measures: `ranks` here or `nodes` nodes, as the cluster counts sizes."""
    if ranks < 1 or nodes < 1:
        raise ConfigError(f"--ranks {ranks} --nodes {nodes}: both must be 1 or more, e.g. --nodes 2")
    name = f"profile-{cfg.cluster.name}-{time.strftime('%Y%m%d-%H%M%S')}"
    sweep = dataclasses.replace(cfg.sweep, world_sizes=[ranks], nodes=[nodes], repeats=1, pack=False, name=name)
    cfg = dataclasses.replace(cfg, sweep=sweep)
    ((n, world),) = sweep_sizes(cfg)
    steps = profile_plan.steps(device_type(cfg))
    return cfg, make_trial(cfg, index=0, world_size=world, nodes=n, steps=steps, warmup_steps=0)


def main(args: argparse.Namespace) -> int:
    cfg, trial = profile_config(compose_config(list(args.overrides), args.recipes), args.ranks, args.nodes)
    if args.output and not Path(args.output).parent.is_dir():
        raise ConfigError(f"--output {args.output}: folder {Path(args.output).parent} does not exist; create it first")
    executor = executor_for(cfg)
    executor.check_trials([trial])
    console = Console(stderr=True)
    sweep_dir = sw.create_sweep_dir(cfg, [(trial, cfg)], list(args.overrides))
    console.print(f"profile {escape(sweep_dir.name)}: {trial.nodes} node(s), {trial.world_size} ranks", soft_wrap=True)
    try:
        executor.run_batch(sweep_dir, [trial], progress_bars=not args.quiet, payload=profile_payload())
    except KeyboardInterrupt:
        executor.interrupted(sweep_dir, detach=False)
        raise
    tdir = trial_dir(sweep_dir, trial.trial_id)
    made = tdir / profile_plan.PROFILE_FILE
    if not made.exists():
        outcome = read_json(tdir / "outcome.json") or {}
        print(
            f"launcher: profile failed: {outcome.get('reason') or 'no profile written'}; logs in {tdir}",
            file=sys.stderr,
        )
        return 1
    profile = site_profile.load(made)  # read back: a file plan refuses is not handed on
    out = Path(args.output) if args.output else made
    if out != made:
        shutil.copyfile(made, out)
    Console().print(summary(profile, read_json(made) or {}))
    print(f"profile written to {out}; plan with: launcher plan {' '.join(args.overrides)} cluster.profile={out}")
    return 0


def summary(profile: site_profile.SiteProfile, doc: dict) -> Table:
    """One row a measurement kind: matmuls and attention per dtype (the best), the copy, the per-op cost,
    each collective and scope (bus bandwidth at its largest size, latency at its smallest)."""
    t = Table(title=f"site profile: {profile.device_name}, {doc.get('ranks')} ranks on {doc.get('nodes')} node(s)")
    t.add_column("measured", no_wrap=True)
    t.add_column("figure")
    t.add_column("at")
    for dtype, points in profile.matmul.items():
        best = max(points, key=lambda p: p[3])
        t.add_row(f"matmul {dtype}", f"{best[3]:.3g} TFLOP/s", f"{best[0]}×{best[1]}×{best[2]} (best of {len(points)})")
    for dtype, att in profile.attention.items():
        seq, head_dim, tflops = max(att, key=lambda p: p[2])
        t.add_row(f"attention {dtype}", f"{tflops:.3g} TFLOP/s", f"seq {seq}, head dim {head_dim} (best of {len(att)})")
    t.add_row("memory copy", f"{profile.mem_bw_gbs:.3g} GB/s", "")
    if profile.op_us:
        t.add_row("per op", f"{profile.op_us:.3g} µs", "host time per dispatched op of a tiny step")
    for (op, scope), pts in profile.collectives.items():
        n = profile.scope_ranks[scope]
        t.add_row(f"{op} {scope} ({n} ranks)", f"{pts[-1].busbw_gbs:.3g} GB/s busbw", f"{pts[-1].bytes} B")
        t.add_row("", f"{pts[0].latency_us:.3g} µs", f"{pts[0].bytes} B")
    for scope, share in profile.overlap.items():
        t.add_row(f"overlap {scope}", f"{share:.2f}", "share of an all-reduce compute hides")
    for line in doc.get("skipped") or []:
        t.add_row("not measured", escape(str(line)), "")
    return t
