"""Performance-model accuracy on the bed: held-out sizes and accumulations, the fitted link, and
how often the nominal 90% interval holds trials the fit never saw.

Brings up the dev cluster as a bed with dedicated compute and a known interconnect
(`launcher cluster up --cpus-per-node 0.45 --link-rate 200mbit`: 25 MB/s between nodes, loopback
inside one; lifted again once its sweeps end, as a plain `cluster up` keeps a running cluster's limits),
then runs its own sweeps into a temporary folder: DDP tiny_gpt over nodes 1–4 × accumulation 1, 2,
with 1 and with 2 ranks per node (cluster.tasks_per_node), repeated in interleaved rounds (every size once
per round, so slow stretches of the machine hit all sizes).
For each ranks-per-node and split, the model (launcher.perf.calibrate) is fitted on the training
trials only and predicts the held-out ones:
  sizes         fit nodes {1,2,4} → predict nodes 3
  extrapolate   fit nodes {1,2,3} → predict nodes 4
  accum 1→2     fit accumulation 1 → predict accumulation 2
  accum 2→1     fit accumulation 2 → predict accumulation 1
Before the sweeps, the bed is profiled (`launcher profile`, 2 nodes at each ranks per node,
benchmarks/bed_profile.py), and every measured shape is also predicted from that profile alone, with
nothing fitted (issue 32 item 2): MAPE against the same goal, per run; `--runs` adds earlier runs' folders
so the figure is reported per run with its median and spread (the goal holds on 5 runs).
Truth is the measured held-out trials: MAPE of tokens/s against each held-out shape's median,
coverage of every held-out trial by the interval. Goals: MAPE ≤ 10% (stretch ≤ 5%), coverage
≥ 80%, fitted inter-node bandwidth within ±20% of the configured rate.

    flock /tmp/bed.lock .venv/bin/python -m benchmarks.model_accuracy [--rounds 2] [--steps 10]
    .venv/bin/python -m benchmarks.model_accuracy --evaluate DIR [DIR ...]   # sweeps already run
    ... --runs RUN [RUN ...]   # earlier runs' folders (each a /tmp/model-accuracy-* with its bed.json)
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shlex
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from benchmarks import bed_profile
from launcher.io import atomic_write_json, atomic_write_text
from launcher.perf.calibrate import Measured, fit_layouts, load_measured, shape_at
from launcher.perf.interval import coverage
from launcher.perf.summary import interval_phrase
from launcher.slurm.devcluster.limits import parse_rate

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent

SPLITS = {
    "sizes": (lambda nodes, accum: nodes != 3, "fit nodes {1,2,4}, predict nodes 3"),
    "extrapolate": (lambda nodes, accum: nodes != 4, "fit nodes {1,2,3}, predict nodes 4"),
    "accum 1→2": (lambda nodes, accum: accum == 1, "fit accumulation 1, predict accumulation 2"),
    "accum 2→1": (lambda nodes, accum: accum == 2, "fit accumulation 2, predict accumulation 1"),
    "accum 1→2 at scale": (
        lambda nodes, accum: accum == 1 or nodes == 1,
        "fit accumulation 1 + accumulation 2 on one node, predict accumulation 2 on 2–4 nodes",
    ),
}
GOAL_MAPE, STRETCH_MAPE, GOAL_COVERAGE, GOAL_BW = 10.0, 5.0, 0.80, 0.20
GOAL_RUNS = 5
"""Runs the profile-alone figure must hold on (issue 32's acceptance: "within its goal on 5 runs")."""
BUDGET_S = 600.0
"""The benchmark's wall-clock bound: a round is started only if one more (as long as the longest
so far) still ends inside it, less EVALUATE_S."""
EVALUATE_S = 15.0


def launcher(*args: str, capture: bool = False) -> str:
    argv = [sys.executable, "-m", "launcher", *args]
    done = subprocess.run(argv, check=True, cwd=ROOT, text=True, capture_output=capture)
    return done.stdout if capture else ""


def bring_up_bed(cpus: str, rate: str) -> str:
    """The bed this benchmark needs, applied in place whatever the cluster ran before; its status."""
    launcher("cluster", "up", "--cpus-per-node", cpus, "--link-rate", rate)
    return launcher("cluster", "status", capture=True)


def lift_bed() -> None:
    """The dev cluster back to no CPU quota and an unshaped link: a plain `launcher cluster up` keeps a
    running cluster's limits, so a test session after this benchmark would otherwise run on its bed."""
    launcher("cluster", "up", "--cpus-per-node", "0", "--link-rate", "0")


def run_rounds(base: Path, rounds: int, steps: int, warmup: int, start: float) -> list[Path]:
    """Interleaved rounds: each round measures every (ranks per node, nodes, accumulation) once.
    A round that would end past BUDGET_S is not started (the result says how many ran)."""
    sweeps: list[Path] = []
    longest = 0.0
    for r in range(rounds):
        began = time.time()
        if r and began - start + longest > BUDGET_S - EVALUATE_S:
            print(
                f"round {r + 1} not started: {began - start:.0f} s so far + {longest:.0f} s a round > {BUDGET_S:.0f} s"
            )
            break
        for rpn in (1, 2):
            name = f"rpn{rpn}-round{r + 1}"
            launcher(
                "sweep",
                "cluster=devcluster",
                f"cluster.tasks_per_node={rpn}",
                "sweep.nodes=[1,2,3,4]",
                "batch.accum=1,2",
                f"sweep.steps={steps}",
                f"sweep.warmup_steps={warmup}",
                f"sweep.name={name}",
                f"sweep.results_dir={base}",
                "--quiet",
            )
            sweeps.append(base / name)
        longest = max(longest, time.time() - began)
    return sweeps


def _key(m: Measured) -> tuple[int, int]:
    return m.trial["nodes"], m.trial["accum"]


def _tokens(m: Measured) -> float:
    return m.metrics["tokens_per_s"]


def evaluate_split(measured: list[Measured], train_if) -> dict:
    """Fit on the training trials, predict each held-out shape: error against its median, and
    whether each of its trials lies inside the interval."""
    train = [m for m in measured if train_if(*_key(m))]
    test = [m for m in measured if not train_if(*_key(m))]
    model = fit_layouts(train, *_links(train))["ddp"]
    shapes = []
    for key in sorted({_key(m) for m in test}):
        trials = [m for m in test if _key(m) == key]
        shape = shape_at(trials[0])
        seq = trials[0].config["model"]["seq_len"]
        p = model.predict(shape)
        pred = p.tokens_per_s(shape.global_batch, seq)
        low, high = p.tokens_per_s_interval(shape.global_batch, seq)
        median = statistics.median(map(_tokens, trials))
        shapes.append(
            {
                "nodes": key[0],
                "accum": key[1],
                "world_size": shape.world_size,
                "predicted_tokens_per_s": pred,
                "low": low,
                "high": high,
                "measured_median_tokens_per_s": median,
                "measured_tokens_per_s": [_tokens(m) for m in trials],
                "error_pct": 100 * abs(pred - median) / median,
            }
        )
    inside, total = coverage([(t, s["low"], s["high"]) for s in shapes for t in s["measured_tokens_per_s"]])
    return {
        "train_trials": len(train),
        "mape_pct": statistics.fmean(s["error_pct"] for s in shapes),
        "inside": inside,
        "held_out_trials": total,
        "shapes": shapes,
        "model": model.to_dict(),
        "interval": interval_phrase(model),
    }


def _links(trials: list[Measured]) -> tuple[str, str]:
    """The presets the recipe names, for whatever the trials cannot show."""
    cluster = trials[0].config["cluster"]
    return cluster["intra_link"], cluster["inter_link"]


def _compute_per_micro(trials: list[Measured]) -> dict[str, float]:
    """Median single-rank compute per micro-batch (the record's compute_time_s ÷ accumulation) per
    node count: dedicated compute keeps it flat across sizes."""
    per: dict[int, list[float]] = {}
    for m in trials:
        if m.metrics.get("compute_time_s"):
            per.setdefault(m.trial["nodes"], []).append(m.metrics["compute_time_s"] / m.trial["accum"])
    return {str(n): statistics.median(v) for n, v in sorted(per.items())}


def evaluate(sweeps: list[Path]) -> dict:
    """Per ranks per node: the fit on every trial (the link, the contention term) and each split."""
    measured = [m for s in sweeps for m in load_measured(s)]
    out = {}
    for rpn in sorted({m.ranks_per_node for m in measured}):
        mine = [m for m in measured if m.ranks_per_node == rpn]
        full = fit_layouts(mine, *_links(mine))["ddp"]
        out[str(rpn)] = {
            "trials": len(mine),
            "compute_per_micro_s": _compute_per_micro(mine),
            "contention": sorted({float(m.metrics.get("cpu_contention") or 1.0) for m in mine}),
            "full_fit": full.to_dict(),
            "splits": {name: {"label": label, **evaluate_split(mine, rule)} for name, (rule, label) in SPLITS.items()},
        }
    return out


def verdict(ok: bool) -> str:
    return "met" if ok else "NOT met"


def mape_cell(mape: float) -> str:
    goal = f"≤ {GOAL_MAPE:g}% {verdict(mape <= GOAL_MAPE)}"
    return f"{mape:.1f}% ({goal}; stretch ≤ {STRETCH_MAPE:g}% {verdict(mape <= STRETCH_MAPE)})"


def bandwidth_lines(results: dict, rate_mb_s: float) -> list[str]:
    lines = [
        "| ranks per node | trials | fitted inter-node bandwidth | vs configured | latency α | source |",
        "|---|---|---|---|---|---|",
    ]
    for rpn, r in results.items():
        inter = r["full_fit"]["inter"]
        mb = inter["bandwidth_gbps"] * 1e3
        off = mb / rate_mb_s - 1
        lines.append(
            f"| {rpn} | {r['trials']} | {mb:.1f} MB/s | {off:+.0%} (±{GOAL_BW:.0%} {verdict(abs(off) <= GOAL_BW)}) | "
            f"{inter['latency_s'] * 1e3:.2f} ms | {r['full_fit']['sources']['inter']} |"
        )
    return lines


def accuracy_lines(results: dict) -> list[str]:
    lines = [
        "| ranks per node | split | trained on | MAPE of tokens/s | worst shape | held-out trials inside the 90% "
        "interval |",
        "|---|---|---|---|---|---|",
    ]
    for rpn, r in results.items():
        for name, s in r["splits"].items():
            worst = max(x["error_pct"] for x in s["shapes"])
            share = s["inside"] / s["held_out_trials"]
            lines.append(
                f"| {rpn} | {name} | {s['label']} ({s['train_trials']} trials) | {mape_cell(s['mape_pct'])} | "
                f"{worst:.1f}% | {s['inside']}/{s['held_out_trials']} ({share:.0%}) |"
            )
    return lines


def shape_lines(results: dict) -> list[str]:
    lines = [
        "| ranks per node | split | nodes | accum | measured tok/s (median; trials) | predicted [90% interval] | "
        "error |",
        "|---|---|---|---|---|---|---|",
    ]
    for rpn, r in results.items():
        for name, s in r["splits"].items():
            for x in s["shapes"]:
                trials = ", ".join(f"{t:,.0f}" for t in x["measured_tokens_per_s"])
                lines.append(
                    f"| {rpn} | {name} | {x['nodes']} | {x['accum']} | {x['measured_median_tokens_per_s']:,.0f} "
                    f"({trials}) | {x['predicted_tokens_per_s']:,.0f} [{x['low']:,.0f}–{x['high']:,.0f}] | "
                    f"{x['error_pct']:.1f}% |"
                )
    return lines


def totals(results: dict) -> dict:
    splits = [s for r in results.values() for s in r["splits"].values()]
    inside = sum(s["inside"] for s in splits)
    held = sum(s["held_out_trials"] for s in splits)
    return {
        "inside": inside,
        "held_out_trials": held,
        "coverage": inside / held,
        "mape_pct": statistics.fmean(s["mape_pct"] for s in splits),
        "worst_mape_pct": max(s["mape_pct"] for s in splits),
    }


METHOD = (
    "How the interval is made (launcher/perf/fit.py, interval.py): each shape (a configuration, its repeats "
    "together) is left out in turn, both stages of the fit (links, then compute/exposure/overhead) are refitted "
    "on the rest, and its trials are predicted; the RMS of those relative errors is the scatter σ, never below "
    "the run-to-run noise that repeats of one shape show. The half-width is t·σ, t the Student quantile of the "
    "nominal level on (shapes − fitted parameters) degrees of freedom, plus the parameter variance a predicted "
    "shape has beyond that of the trials' own shapes (extrapolation widens it). No fixed floor sets it (the 3% "
    "floor is below every figure here). The truth it is judged on is measured trials the fit never saw."
)


def compute_line(results: dict) -> str:
    parts = []
    for rpn, r in results.items():
        c = r["compute_per_micro_s"]
        spread = max(c.values()) / min(c.values()) - 1
        per = ", ".join(f"{n} node(s) {v * 1e3:.0f} ms" for n, v in c.items())
        parts.append(f"{rpn} rank(s)/node: {per} (largest {spread:.0%} above smallest)")
    return (
        "Single-rank compute per micro-batch (record's compute_time_s ÷ accumulation, median): "
        + "; ".join(parts)
        + "."
    )


def overhead_line(results: dict) -> str:
    o = ", ".join(f"{rpn} rank(s)/node {r['full_fit']['overhead_s'] * 1e3:.0f} ms" for rpn, r in results.items())
    return (
        f"The accumulation splits 1→2 and 2→1 train on one accumulation, where every trial has the same work "
        f"per rank, so compute and the fixed per-step overhead cannot be told apart: the fit holds the overhead "
        f"at 0 and lets compute absorb it, which misses by about overhead ÷ step at the other accumulation. Fitted "
        f"on every trial, the overhead is {o}. Measuring the other accumulation on one node pins it: "
        f'"accum 1→2 at scale".'
    )


def contention_line(results: dict) -> str:
    levels = sorted({c for r in results.values() for c in r["contention"]})
    gamma = {r["full_fit"]["sources"]["contention_exponent"] for r in results.values()}
    exps = {r["full_fit"]["contention_exponent"] for r in results.values()}
    return (
        f"Contention recorded by the trials: {', '.join(f'{c:g}' for c in levels)}; contention exponent "
        f"{', '.join(f'{g:g}' for g in sorted(exps))}: {'; '.join(sorted(gamma))}."
    )


def markdown(doc: dict) -> str:
    results, t = doc["results"], doc["totals"]
    rate = doc["bed"]["link_rate_mb_s"]
    lines = [
        "# Performance-model accuracy on the bed (held-out trials, real dev-cluster sweeps)",
        "",
        f"Bed: `launcher cluster up --cpus-per-node {doc['bed']['cpus_per_node']} --link-rate "
        f"{doc['bed']['link_rate']}` "
        f"({rate:g} MB/s between nodes, loopback inside one), applied by the benchmark itself. Sweeps: DDP tiny_gpt, "
        f"nodes 1–4 × accumulation 1, 2 × ranks per node 1, 2; {doc.get('rounds_run', doc['rounds'])} interleaved "
        "round(s) of "
        f"{doc['rounds']} asked (a round that would pass {BUDGET_S:.0f} s is not started), {doc['steps']} steps "
        f"({doc['warmup_steps']} warm-up). Sweeps in `{doc['sweeps_dir']}` (a temporary folder).",
        "",
        f"Over every split: MAPE {t['mape_pct']:.1f}% on average, worst split {mape_cell(t['worst_mape_pct'])}; "
        f"coverage of held-out trials by the nominal 90% interval {t['inside']}/{t['held_out_trials']} = "
        f"{t['coverage']:.0%} (goal ≥ {GOAL_COVERAGE:.0%} {verdict(t['coverage'] >= GOAL_COVERAGE)}).",
        "",
        "## Inter-node bandwidth (fit on every trial of that ranks-per-node)",
        "",
        *bandwidth_lines(results, rate),
        "",
        contention_line(results),
        "",
        compute_line(results),
        "",
        "## Held-out accuracy",
        "",
        *accuracy_lines(results),
        "",
        overhead_line(results),
        "",
        "Intervals: "
        + "; ".join(
            f"{rpn} rank(s)/node {name}: {s['interval']}"
            for rpn, r in results.items()
            for name, s in r["splits"].items()
        )
        + ".",
        "",
        METHOD,
        "",
        *(bed_profile.lines(doc["profiled"], GOAL_MAPE) + [""] if doc.get("profiled") else []),
        *(bed_profile.runs_lines(doc["runs"], GOAL_MAPE, GOAL_RUNS) + [""] if doc.get("runs") else []),
        "## Per held-out shape",
        "",
        *shape_lines(results),
        "",
        "## Bed as `launcher cluster status` showed it",
        "",
        "```",
        doc["bed"]["status"].strip(),
        "```",
        "",
        f"Reproduce: `{doc['command']}` ({doc['wall_s']:.0f} s wall on {doc['cpus']} cores, goal ≤ {BUDGET_S:.0f} s "
        f"{verdict(doc['wall_s'] <= BUDGET_S)}).",
        "",
    ]
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--evaluate", nargs="+", metavar="DIR", help="evaluate sweeps already run instead of running them")
    ap.add_argument("--rounds", type=int, default=2, help="interleaved repeats of every shape (default 2)")
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--warmup-steps", type=int, default=3)
    ap.add_argument("--cpus-per-node", default="0.45")
    ap.add_argument("--link-rate", default="200mbit")
    ap.add_argument("--runs", nargs="+", default=[], metavar="RUN", help="earlier runs' folders to report beside")
    args = ap.parse_args()
    os.environ.setdefault("SLURM_CONF", "/var/tmp/launcher-devcluster/etc/slurm.conf")
    start = time.time()
    if args.evaluate:
        sweeps = [Path(d) for d in args.evaluate]
        # The settings the sweeps ran with, as the run that made them recorded.
        run = json.loads((sweeps[0].parent / "bed.json").read_text())
    else:
        run = {
            "command": "flock /tmp/bed.lock "
            + shlex.join([".venv/bin/python", "-m", "benchmarks.model_accuracy", *sys.argv[1:]]),
            "rounds": args.rounds,
            "steps": args.steps,
            "warmup_steps": args.warmup_steps,
            "bed": {
                "cpus_per_node": args.cpus_per_node,
                "link_rate": args.link_rate,
                "link_rate_mb_s": parse_rate(args.link_rate) / 8e6,
                "status": bring_up_bed(args.cpus_per_node, args.link_rate),
            },
        }
        base = Path(tempfile.mkdtemp(prefix="model-accuracy-"))
        run["sweeps_dir"] = str(base)
        try:
            run["profiles"] = {str(rpn): str(bed_profile.profile_bed(base, rpn)) for rpn in (1, 2)}  # before sweeps
            atomic_write_json(base / "bed.json", run)
            sweeps = run_rounds(base, args.rounds, args.steps, args.warmup_steps, start)
        finally:
            lift_bed()
        run["sweep_wall_s"] = time.time() - start
        run["rounds_run"] = len(sweeps) // 2
        atomic_write_json(base / "bed.json", run)
    evaluating = time.time()
    results = evaluate(sweeps)
    measured = [m for s in sweeps for m in load_measured(s)]
    profiled = {
        rpn: bed_profile.predict([m for m in measured if m.ranks_per_node == int(rpn)], Path(path))
        for rpn, path in run.get("profiles", {}).items()
    }
    # Bring-up and sweeps as the run measured them, plus this evaluation: the whole benchmark.
    wall = run.get("sweep_wall_s", 0.0) + time.time() - evaluating
    doc = {
        **run,
        "machine": platform.platform(),
        "cpus": os.cpu_count(),
        "wall_s": wall,
        "goals": {
            "mape_pct": GOAL_MAPE,
            "stretch_mape_pct": STRETCH_MAPE,
            "coverage": GOAL_COVERAGE,
            "bandwidth_rel": GOAL_BW,
        },
        "results": results,
        "totals": totals(results),
        "profiled": profiled,
        "runs": bed_profile.across_runs([Path(r) for r in args.runs] + [sweeps[0].parent]),
    }
    atomic_write_json(HERE / "results" / "model_accuracy.json", doc)
    text = markdown(doc)
    atomic_write_text(HERE / "results" / "model_accuracy.md", text)
    print(text)


if __name__ == "__main__":
    main()
