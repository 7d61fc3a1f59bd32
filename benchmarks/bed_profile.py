"""The bed's own site profile, and what it alone predicts (issue 32 item 2), for benchmarks.model_accuracy.

Before the sweeps, `launcher profile` measures the bed as its sweeps will load it: 2 nodes at each ranks
per node the sweeps use (the nodes' CPU share is split among their ranks, so a profile per ranks per
node). After them, every measured shape (nodes × accumulation) is predicted by the plan's presets model
with `cluster.profile` and nothing fitted (launcher.perf.plan_table.preset_model: compute from tiny_gpt's
operations at the profile's measured rates, launcher/perf/site_profile.step_seconds; links from its
all-reduces) and judged against its trials' median tokens/s. Across runs (`--runs`): each run's own
profiles predict its own sweeps; the figure per run, its median and spread.
"""

from __future__ import annotations

import json
import statistics
import subprocess
import sys
from pathlib import Path

from launcher.config.compose import compose_config
from launcher.perf import preset_fit, site_profile
from launcher.perf.calibrate import Measured, load_measured, shape_at
from launcher.perf.plan_table import preset_model, work_of

ROOT = Path(__file__).resolve().parent.parent


def profile_bed(base: Path, ranks_per_node: int) -> Path:
    """`launcher profile` of 2 bed nodes at `ranks_per_node`; the profile's path."""
    out = base / f"bed_profile_rpn{ranks_per_node}.json"
    argv = [sys.executable, "-m", "launcher", "profile", "cluster=devcluster"]
    argv += [f"cluster.tasks_per_node={ranks_per_node}", f"sweep.results_dir={base}", "--nodes", "2"]
    subprocess.run([*argv, "--output", str(out), "--quiet"], check=True, cwd=ROOT)
    return out


def predict(measured: list[Measured], profile: Path) -> dict:
    """Each measured (nodes, accumulation) of one ranks per node, predicted from `profile` alone."""
    fit, shapes, priced = preset_fit.load(), [], ""
    for nodes, accum in sorted({(m.trial["nodes"], m.trial["accum"]) for m in measured}):
        trials = [m for m in measured if (m.trial["nodes"], m.trial["accum"]) == (nodes, accum)]
        first = trials[0]
        over = [f"cluster.{k}={first.config['cluster'][k]}" for k in ("tasks_per_node",)]
        cfg = compose_config(["cluster=devcluster", *over, f"batch.accum={accum}", f"cluster.profile={profile}"])
        shape = shape_at(first)
        p = preset_model(cfg, work_of(cfg), 1.0, fit).predict(shape)  # mfu unused: the profile prices compute
        priced = priced or site_profile.phrase(cfg, work_of(cfg).dtype)
        pred = p.tokens_per_s(shape.global_batch, cfg.model.seq_len)
        median = statistics.median(m.metrics["tokens_per_s"] for m in trials)
        shapes.append(
            {
                "nodes": nodes,
                "accum": accum,
                "predicted_tokens_per_s": pred,
                "measured_median_tokens_per_s": median,
                "error_pct": 100 * (pred - median) / median,
                "compute_s": p.compute_s,
                "comm_s": p.comm_s,
            }
        )
    return {
        "profile": str(profile),
        "mape_pct": statistics.fmean(abs(s["error_pct"]) for s in shapes),
        "shapes": shapes,
        "priced": priced,
    }


def lines(profiled: dict, goal_pct: float) -> list[str]:
    """The markdown section: per ranks per node, MAPE against the goal and each shape's signed error."""
    out = [
        "## Predicted from the bed's profile alone (`launcher profile`, nothing fitted)",
        "",
        "| ranks per node | shape (nodes × accum) | predicted tok/s | measured median | error |",
        "|---|---|---|---|---|",
    ]
    for rpn, r in profiled.items():
        for s in r["shapes"]:
            out.append(
                f"| {rpn} | {s['nodes']} × {s['accum']} | {s['predicted_tokens_per_s']:,.0f} | "
                f"{s['measured_median_tokens_per_s']:,.0f} | {s['error_pct']:+.1f}% |"
            )
    out.append("")
    for rpn, r in profiled.items():
        met = "met" if r["mape_pct"] <= goal_pct else "NOT met"
        out.append(f"- {rpn} rank(s)/node: MAPE {r['mape_pct']:.1f}% (goal ≤ {goal_pct:g}% {met}); `{r['profile']}`")
        if r.get("priced"):
            out.append(f"  - priced as (plan's footer, accumulation 1): {r['priced']}")
    return out


def across_runs(bases: list[Path]) -> list[dict]:
    """Each run's profile-alone MAPE per ranks per node: its own profiles (its bed.json) predicting its own
    sweeps (the folder's rpn*-round* sweeps), with today's code."""
    out = []
    for base in bases:
        run = json.loads((base / "bed.json").read_text())
        measured = [m for s in sorted(base.glob("rpn*-round*")) if s.is_dir() for m in load_measured(s)]
        mape = {
            rpn: predict([m for m in measured if m.ranks_per_node == int(rpn)], Path(path))["mape_pct"]
            for rpn, path in sorted(run.get("profiles", {}).items())
        }
        out.append({"run": str(base), "mape_pct": mape})
    return out


def runs_lines(runs: list[dict], goal_pct: float, goal_runs: int) -> list[str]:
    """Per run and ranks per node the profile-alone MAPE, then per ranks per node the median, the spread
    (lowest–highest) and how many runs met the goal: met only where every one of ≥ goal_runs runs did."""
    rpns = sorted({rpn for r in runs for rpn in r["mape_pct"]})
    out = [
        f"### Across runs ({len(runs)} run(s); the issue asks for {goal_runs})",
        "",
        "| run | " + " | ".join(f"{rpn} rank(s)/node MAPE" for rpn in rpns) + " |",
        "|---|" + "---|" * len(rpns),
    ]
    for r in runs:
        cells = " | ".join(f"{r['mape_pct'][rpn]:.1f}%" if rpn in r["mape_pct"] else "—" for rpn in rpns)
        out.append(f"| `{r['run']}` | {cells} |")
    out += [
        "",
        "Each run: `flock /tmp/bed.lock python -m benchmarks.model_accuracy` (its own bed bring-up, profiles and "
        "sweeps, in its own temporary folder); this table: the last run with `--evaluate` and the earlier ones "
        "with `--runs`, each run's profiles predicting its own sweeps with the same code.",
        "",
    ]
    for rpn in rpns:
        v = [r["mape_pct"][rpn] for r in runs if rpn in r["mape_pct"]]
        within = sum(x <= goal_pct for x in v)
        met = "met" if within == len(v) >= goal_runs else "NOT met"
        out.append(
            f"- {rpn} rank(s)/node: median {statistics.median(v):.1f}%, spread {min(v):.1f}–{max(v):.1f}% over "
            f"{len(v)} run(s); within ≤ {goal_pct:g}% on {within} of {len(v)} (goal: every one of ≥ {goal_runs} "
            f"runs; {met})"
        )
    return out
