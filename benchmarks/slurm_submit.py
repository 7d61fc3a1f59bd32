"""Slurm submission costs on the dev cluster (`launcher cluster up` first).

1. Render and submit a 256-trial sweep, as 4 job arrays (4 sizes × 64 repeats, what the
   launcher submits for sweep.repeats) and as 256 single jobs, interleaved over rounds. Jobs
   are submitted held (`--hold`) and cancelled afterwards, so nothing runs. Goal: < 2 s.
2. Time from sbatch to the first training step of a 1-node trial: sbatch→job start (sacct
   Start) and start→`step 1/` in rank 0's log.

Writes benchmarks/results/slurm_submit.{json,md}.
    .venv/bin/python benchmarks/slurm_submit.py [--rounds 3] [--first-step-runs 3]
"""

from __future__ import annotations

import argparse
import datetime as dt
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

from launcher.slurm import devcluster  # noqa: E402
from launcher.config.compose import compose_config  # noqa: E402
from launcher.io import atomic_write_json, atomic_write_text, read_json  # noqa: E402
from launcher.trials.spec import sweep_trials  # noqa: E402
from launcher.slurm.render import job_request, render_script  # noqa: E402
from launcher.slurm.submit import PreparedJob, job_requests, submit_jobs, track, write_scripts  # noqa: E402
from launcher.run.sweep import create_sweep_dir  # noqa: E402

GOAL_S = 2.0
HELD = ["cluster=devcluster", "sweep.nodes=[1,2,3,4]", "sweep.repeats=64", "cluster.sbatch_extra=['--hold']",
        "cluster.serialize_trials=false"]  # fmt: skip


def submit_256(work: Path, arrays: bool, env: dict) -> dict:
    """Render + write + sbatch every job of a 256-trial sweep; return timings and job ids."""
    cfg = compose_config(HELD + [f"sweep.results_dir={work}"])
    trials = sweep_trials(cfg)
    assert len(trials) == 256
    sweep_dir = create_sweep_dir(cfg, [(t, cfg) for t in trials], [])
    t0 = time.perf_counter()
    if arrays:
        jobs = job_requests(cfg, sweep_dir, trials)
    else:  # one job per trial: what a launcher without arrays would submit
        jobs = []
        for i, t in enumerate(trials):
            req = job_request(cfg.cluster, [t], [sweep_dir.resolve() / "trials" / t.trial_id], job_name=f"lnch-{sweep_dir.name}",
                              log_dir=sweep_dir.resolve() / "jobs", python=sys.executable)  # fmt: skip
            jobs.append(PreparedJob(name=f"job-{i:03d}", trials=(t,), request=req, script=render_script(req)))
    write_scripts(sweep_dir, jobs)
    t1 = time.perf_counter()
    ids: list[str] = []
    submit_jobs(sweep_dir, jobs, env, on_submit=lambda job, job_id: ids.append(job_id))
    t2 = time.perf_counter()
    subprocess.run(["scancel", *ids], env=env, check=True)
    return {"jobs": len(jobs), "render_s": t1 - t0, "submit_s": t2 - t1, "total_s": t2 - t0}


def first_step(work: Path, env: dict) -> dict:
    cfg = compose_config(["cluster=devcluster", "sweep.nodes=[1]", "sweep.steps=3", "sweep.warmup_steps=1",
                          f"sweep.results_dir={work}"])  # fmt: skip
    trials = sweep_trials(cfg)
    sweep_dir = create_sweep_dir(cfg, [(t, cfg) for t in trials], [])
    jobs = job_requests(cfg, sweep_dir, trials)
    write_scripts(sweep_dir, jobs)
    t0 = time.time()
    submit_jobs(sweep_dir, jobs, env)
    log = sweep_dir / "trials" / trials[0].trial_id / "rank0.attempt0.log"
    while not (log.exists() and "step 1/" in log.read_text()):
        if time.time() - t0 > 300:
            raise SystemExit("no first step within 300 s")
        time.sleep(0.05)
    t_step = time.time()
    job = read_json(sweep_dir / "trials" / trials[0].trial_id / "submission.json")["job_id"]
    start = ""
    while not start or start == "Unknown":
        start = subprocess.run(["sacct", "-n", "-X", "-P", "--format=Start", "-j", job], env=env, capture_output=True,
                               text=True).stdout.strip()  # fmt: skip
        time.sleep(0.2)
    started = dt.datetime.fromisoformat(start).timestamp()  # whole seconds: sacct's resolution
    track(sweep_dir, cfg, trials, progress_bars=False)  # let the job end before its folder goes
    return {"submit_to_first_step_s": t_step - t0, "submit_to_start_s": started - t0, "start_to_first_step_s": t_step - started}


def start_words(seconds: float) -> str:
    return "under 1 s" if seconds < 1 else f"{seconds:.0f} s"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--first-step-runs", type=int, default=3)
    args = ap.parse_args()
    env = devcluster.up(log=lambda line: None).env()
    rounds, firsts = [], []
    with tempfile.TemporaryDirectory(dir="/var/tmp") as work:
        for r in range(args.rounds):
            for arrays in ([True, False] if r % 2 == 0 else [False, True]):
                res = submit_256(Path(work), arrays, env) | {"mode": "arrays" if arrays else "single jobs", "round": r}
                rounds.append(res)
                print(f"round {r}: {res['mode']:11s} {res['jobs']:3d} jobs render {res['render_s']:.2f} s "
                      f"submit {res['submit_s']:.2f} s total {res['total_s']:.2f} s", flush=True)  # fmt: skip
        for _ in range(args.first_step_runs):
            firsts.append(first_step(Path(work), env))
            print(f"first step: {firsts[-1]['submit_to_first_step_s']:.2f} s after sbatch", flush=True)

    def med(mode: str, key: str) -> float:
        return statistics.median(r[key] for r in rounds if r["mode"] == mode)

    summary = {
        mode: {k: med(mode, k) for k in ("render_s", "submit_s", "total_s")} for mode in ("arrays", "single jobs")
    }
    first = {k: statistics.median(f[k] for f in firsts) for k in firsts[0]}
    result = {"benchmark": "slurm_submit", "measured_at": time.strftime("%Y-%m-%d %H:%M:%S %Z"), "trials": 256,
              "goal_total_s": GOAL_S, "median": summary, "first_step_median": first, "rounds": rounds,
              "first_step_runs": firsts}  # fmt: skip
    atomic_write_json(HERE / "results" / "slurm_submit.json", result)
    a, s = summary["arrays"], summary["single jobs"]
    lines = [
        "# Slurm submission (dev cluster)", "",
        f"Render + submit a 256-trial sweep (4 sizes × 64 repeats), medians of {args.rounds} interleaved rounds:", "",
        "| mode | jobs | render s | sbatch s | total s | goal < 2 s |", "|---|---|---|---|---|---|",
        f"| arrays (what the launcher submits) | 4 | {a['render_s']:.2f} | {a['submit_s']:.2f} | {a['total_s']:.2f} | "
        f"{'met' if a['total_s'] < GOAL_S else 'NOT met'} |",
        f"| single jobs | 256 | {s['render_s']:.2f} | {s['submit_s']:.2f} | {s['total_s']:.2f} | "
        f"{'met' if s['total_s'] < GOAL_S else 'NOT met'} |", "",
        f"Single jobs ÷ arrays, total: {s['total_s'] / a['total_s']:.1f}×.", "",
        f"sbatch → first training step of a 1-node trial, median of {args.first_step_runs}: "
        f"**{first['submit_to_first_step_s']:.1f} s**, of which sbatch → job start {start_words(first['submit_to_start_s'])} "
        "(sacct's Start has whole-second resolution) and the rest is the job script, srun and the payload's "
        "Python/torch import up to `step 1/`.", "",
        f"Measured {result['measured_at']} on the dev cluster (4 nodes in network namespaces on one 2-core machine). "
        "Jobs of part 1 were submitted with --hold and cancelled, so none ran.", "",
        "Reproduce: `launcher cluster up && .venv/bin/python benchmarks/slurm_submit.py`", "",
    ]  # fmt: skip
    atomic_write_text(HERE / "results" / "slurm_submit.md", "\n".join(lines))
    print("\n".join(lines))


if __name__ == "__main__":
    main()
