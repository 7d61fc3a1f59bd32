"""`launcher plan --from` a 1,2-node `job=command` sweep against the measured 4-node row, on the dev
cluster (issue 22): examples/ddp_meter, whose recipe describes its model (job.model_describes_program):
compute calibrated from the program's measured step times, the links from the link probe's three
all-reduces, the gradient from the model's parameters, the ranks' sharing of the cores from the probe.

    .venv/bin/python -m benchmarks.command_plan_from [--runs 5] [--rounds 3] [--steps 60]
    flock /tmp/bed.lock .venv/bin/python -m benchmarks.command_plan_from --cpus-per-node 0.45 --link-rate 200mbit

Each run is a whole measurement (a sweep of its own, a plan from its small sizes, its 4-node truth);
`--runs` (default 5) of them give the error's median and spread, since one run's error moves by as
much as the goal from one run to the next (issue 32 item 6: a single "met" followed a failed run).
Goal: |predicted ÷ measured − 1| ≤ 10% at 4 nodes in at least GOAL_SHARE of the runs, the tolerance the
built-in payload meets for the same
question (benchmarks/results/model_accuracy.md, "extrapolate": fit nodes {1,2,3}, predict 4), which it
meets on the bed with its limits applied (0.45 CPU per node, 200 Mbit/s: --cpus-per-node, --link-rate,
applied in place as benchmarks.model_accuracy applies them); without them it runs on the dev cluster as
it is. The machine's load is recorded beside the figure.

Truth is measured, never modelled: the sizes run in interleaved rounds (sweep.repeats: 1,2,4,1,2,4,…);
the plan reads a copy of the sweep holding only its 1- and 2-node trials, so the 4-node trials cannot
inform it; the 4-node figure is the median over rounds of global batch × tokens per sample ÷ median step
(how the built-in trainer's row counts tokens/s, what the model is calibrated on). The program's own
whole-job rate (total tokens ÷ total time, the command row's tokens/s) is printed beside it.

Measured while writing it (2026-11-25, load average 5–11 from other work on the 2 cores): +7.4%, −22.2%,
+60.3%, +18.8%; the built-in trainer with the same settings +24.6%. Where it misses, 1 → 2 nodes cost the
step 2.8× (1.6× on a quieter bed), far more than the gradient's all-reduce the probe times (5–7 ms):
ranks that meet in gloo's collectives on oversubscribed cores wait for the scheduler, which the model's
contention term (ranks ÷ cores) does not see, for the built-in trainer as for a command.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pandas as pd

from launcher.cli import main as launcher
from launcher.io import atomic_write_json, atomic_write_text
from launcher.slurm import devcluster

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
RECIPES = str(REPO / "examples" / "ddp_meter" / "recipes")
RECIPE = ["job=ddp_meter", "cluster=devcluster", "model=tiny_gpt", "batch.micro=8"]
TOLERANCE = 0.10
GOAL_SHARE = 0.8
"""Runs that must fall within TOLERANCE: 4 of 5, so one lucky run cannot carry the verdict."""


class RunFailed(Exception):
    """A run that gave no figure (a trial that did not complete, on a cluster other work shares): kept as
    a row with its reason, and another run is made in its place."""


def small_sizes_only(sweep: Path, into: Path) -> Path:
    """A copy of `sweep` without its 4-node trials: what a 1,2-node sweep would have left."""
    shutil.copytree(sweep, into)
    for tdir in (into / "trials").iterdir():
        if tdir.name.split("-")[1] == "ws4":
            shutil.rmtree(tdir)
    return into


def measure(work: Path, rounds: int, steps: int) -> dict:
    name = f"cmdplan-{os.getpid()}-{int(time.time())}"
    run = ["sweep.nodes=[1,2,4]", f"sweep.repeats={rounds}", f"sweep.steps={steps}", "sweep.warmup_steps=10"]
    where = [f"sweep.results_dir={work}", f"sweep.name={name}", "--quiet"]
    if launcher(["sweep", "--recipes", RECIPES, *RECIPE, *run, *where]) != 0:
        raise RunFailed("the sweep failed")
    rows = pd.read_csv(work / name / "results.csv")
    if not (rows["status"] == "completed").all():
        bad = rows[rows["status"] != "completed"]
        raise RunFailed(
            "; ".join(f"{t} {st}: {str(why)[:200]}" for t, st, why in bad[["trial_id", "status", "reason"]].values)
        )
    small = small_sizes_only(work / name, work / "small")
    out = work / "plan.csv"
    if launcher(["plan", "--recipes", RECIPES, "--from", str(small), "--gpus", "1,2,4", "--output", str(out)]) != 0:
        raise RunFailed("plan --from failed")
    predicted = float(pd.read_csv(out).set_index("gpus").loc[4, "tokens_per_s"])
    four = rows[rows["nodes"] == 4]
    tokens_per_sample = (four["tokens_per_s"] / four["samples_per_s"]).round()
    by_median = four["global_batch"] * tokens_per_sample / four["step_time_median_s"]
    ones = rows.loc[rows["nodes"] == 1, "step_time_median_s"]
    return {
        "predicted_tokens_per_s": predicted,
        "measured_tokens_per_s": float(by_median.median()),
        "measured_whole_job_tokens_per_s": float(four["tokens_per_s"].median()),
        "one_node_median_step_s": [float(ones.min()), float(ones.max())],
        "rows": rows[["trial_id", "nodes", "tokens_per_s", "step_time_median_s", "busbw_gbps"]].to_dict("records"),
    }


def _summary(errors: list[float], asked: int) -> dict:
    """The runs' errors: median, spread, how many within TOLERANCE, and the verdict (over the runs asked
    for: fewer completed cannot meet it)."""
    within = sum(abs(e) <= TOLERANCE for e in errors)
    return {
        "errors": errors,
        "error_median": statistics.median(errors),
        "error_min": min(errors),
        "error_max": max(errors),
        "error_stdev": statistics.stdev(errors) if len(errors) > 1 else float("nan"),
        "within": within,
        "goal": f"|error| <= {TOLERANCE} in >= {GOAL_SHARE:.0%} of runs",
        "met": within >= GOAL_SHARE * max(asked, len(errors)),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=5, help="whole measurements, each its own sweep and plan")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--steps", type=int, default=60)
    ap.add_argument("--cpus-per-node", help="the bed's CPU limit per node (e.g. 0.45); default: none")
    ap.add_argument("--link-rate", help="the bed's inter-node rate (e.g. 200mbit); default: none")
    args = ap.parse_args()
    if args.runs < 1:
        raise SystemExit(f"command_plan_from: --runs {args.runs} must be at least 1 (5 for the goal's spread)")
    os.environ.update(devcluster.up(log=lambda line: None).env())
    bed = [f"--{k}={v}" for k, v in (("cpus-per-node", args.cpus_per_node), ("link-rate", args.link_rate)) if v]
    if bed:  # as benchmarks.model_accuracy's bed, applied in place
        subprocess.run([sys.executable, "-m", "launcher", "cluster", "up", *bed], check=True)
    os.chdir(REPO)  # the recipe's argv names examples/ddp_meter/train.py from the repository root
    start, load_before = time.time(), os.getloadavg()[0]
    runs, failed = [], []
    while len(runs) < args.runs and len(failed) < args.runs:  # at most as many failures as runs asked for
        with tempfile.TemporaryDirectory(dir="/var/tmp") as work:
            try:
                one = measure(Path(work), args.rounds, args.steps)
            except RunFailed as exc:
                failed.append(str(exc))
                print(f"a run failed ({exc}); another takes its place", flush=True)
                continue
        one["error"] = one["predicted_tokens_per_s"] / one["measured_tokens_per_s"] - 1
        one["load_average_after"] = os.getloadavg()[0]
        runs.append(one)
        print(f"run {len(runs)}/{args.runs}: error {one['error']:+.1%}", flush=True)
    if not runs:
        raise SystemExit("command_plan_from: no run completed: " + " | ".join(failed))
    res = {
        "benchmark": "command_plan_from",
        "measured_at": time.strftime("%Y-%m-%d %H:%M:%S %Z"),
        "command": " ".join(
            [
                ".venv/bin/python -m benchmarks.command_plan_from",
                f"--runs {args.runs} --rounds {args.rounds} --steps {args.steps}",
                *bed,
            ]
        ),
        "bed": bed or "none: the dev cluster as it is",
        "runs": runs,
        "failed_runs": failed,
        "load_average": [load_before, os.getloadavg()[0]],
        "wall_s": time.time() - start,
    } | _summary([r["error"] for r in runs], args.runs)
    stem = "command_plan_from_bed" if bed else "command_plan_from"  # both kept: with and without the limits
    atomic_write_json(HERE / "results" / f"{stem}.json", res)
    lines = report_lines(res, bed, args.rounds)
    atomic_write_text(HERE / "results" / f"{stem}.md", "\n".join(lines) + "\n")
    print("\n".join(lines))


def report_lines(res: dict, bed: list[str], rounds: int) -> list[str]:
    verdict = "met" if res["met"] else "**NOT met**"
    n = len(res["runs"])
    return [
        "# plan --from a 1,2-node command sweep vs the measured 4-node row",
        "",
        f"`{res['command']}`, {res['measured_at']}, {res['wall_s']:.0f} s on the dev cluster, bed limits: "
        f"{' '.join(bed) or 'none'}; load average {res['load_average'][0]:.1f} before, "
        f"{res['load_average'][1]:.1f} after ({os.cpu_count()} cores, shared with other work). "
        "What is compared and why: the module docstring of benchmarks/command_plan_from.py.",
        "",
        f"- error (predicted ÷ measured − 1 at 4 nodes) over {n} runs: median {res['error_median']:+.1%}, "
        f"from {res['error_min']:+.1%} to {res['error_max']:+.1%} (standard deviation {res['error_stdev']:.1%})",
        f"- within ±{TOLERANCE:.0%} (the built-in payload's tolerance, model_accuracy.md): **{res['within']} of {n}** "
        f"runs (goal ≥ {GOAL_SHARE:.0%} of runs: {verdict})",
        f"- runs that gave no figure (each replaced by another): {len(res['failed_runs'])}"
        + "".join(f"; {why}" for why in res["failed_runs"]),
        "",
        "| run | predicted tokens/s | measured (median of "
        f"{rounds} rounds, by median step) | whole-job rate | error | 1-node median steps across rounds (s) |",
        "|---|---|---|---|---|---|",
        *(
            f"| {k + 1} | {r['predicted_tokens_per_s']:,.0f} | {r['measured_tokens_per_s']:,.0f} | "
            f"{r['measured_whole_job_tokens_per_s']:,.0f} | {r['error']:+.1%} | "
            f"{r['one_node_median_step_s'][0]:.4f}–{r['one_node_median_step_s'][1]:.4f} |"
            for k, r in enumerate(res["runs"])
        ),
    ]


if __name__ == "__main__":
    main()
