"""Slurm submission costs on the dev cluster (`launcher cluster up` first).

1. Submit a 256-trial sweep (4 sizes × 64 repeats): `launcher sweep ... --detach` from the shell
   (one job array per size, `%4`: launcher/slurm/submit.py group_trials), and
   benchmarks/submitit_sweep.py from the shell, submitit submitting the same 4 throttled arrays
   with `map_array`. For reference, in process: the launcher's render + submit after planning, and
   the same `map_array` calls. The modes are interleaved (their order rotates each round);
   medians. Every job is submitted held (`--hold`) and cancelled right afterwards, so nothing
   runs. Goal (issue 30 item 11): the launcher from the shell ≤ 2× the submitit script.
2. Time from sbatch to the first training step of a 1-node trial: sbatch→job start (sacct
   Start) and start→`step 1/` in rank 0's log.

Writes benchmarks/results/slurm_submit.{json,md}.
    .venv/bin/python -m benchmarks.slurm_submit [--rounds 5] [--first-step-runs 3]
"""

from __future__ import annotations

import argparse
import datetime as dt
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import submitit

import launcher
from launcher.config.compose import compose_config
from launcher.io import atomic_write_json, atomic_write_text, read_json
from launcher.run.sweep import create_sweep_dir
from launcher.slurm import devcluster
from launcher.slurm.submit import job_requests, submit_jobs, write_scripts
from launcher.slurm.track import track
from launcher.trials.spec import sweep_trials

HERE = Path(__file__).resolve().parent

GOAL_RATIO = 2.0  # issue 30 item 11: the launcher from the shell ≤ 2× a submitit script's map_array of the same trials
ARRAYS = 4  # one per size
HELD = [
    "cluster=devcluster",
    "sweep.nodes=[1,2,3,4]",
    "sweep.repeats=64",
    "cluster.sbatch_extra=['--hold']",
    "cluster.serialize_trials=false",
]


def compile_sources(package: Path) -> None:
    """Byte-compile a launcher package's modules into its __pycache__ (git ignores it), as `pip install`
    does: where PYTHONDONTWRITEBYTECODE is set (this dev machine sets it), a source checkout would
    otherwise compile its ~70 modules again on every run (~40 ms of CPU), which an installed launcher
    never does, and submitit, compiled in site-packages, never does either."""
    subprocess.run([sys.executable, "-m", "compileall", "-q", str(package)], check=True, capture_output=True)


def launcher_shell(work: Path, env: dict, r: int, source: Path | None = None, cache: Path | None = None) -> dict:
    """`launcher sweep ... --detach` from the shell, as a user submits: interpreter start, compose,
    plan, every trial.json and script, 4 sbatch calls (one array per size) and their records.
    `source`: run the launcher of that source tree instead (--before), however it groups jobs.
    `cache`: its composition cache (launcher/config/composed_cache.py); None: a new, empty one."""
    name = f"bench-{r}-{time.monotonic_ns()}"
    cmd = [sys.executable, "-m", "launcher", "sweep", *HELD, f"sweep.results_dir={work}", f"sweep.name={name}"]
    env = env | {"LAUNCHER_CACHE_DIR": str(cache or tempfile.mkdtemp(dir=work, prefix="cache-"))}
    env = env | {"PYTHONPATH": str(source)} if source else env
    cpu0, t0 = _children_cpu(), time.perf_counter()
    try:
        done = subprocess.run([*cmd, "--detach"], env=env, capture_output=True, text=True, cwd=source)
        t1, cpu1 = time.perf_counter(), _children_cpu()
    finally:  # a command that failed after its first sbatch leaves held jobs: cancelled all the same
        subprocess.run(["scancel", f"--name=lnch-{name}"], env=env, check=True)
    if done.returncode:
        raise SystemExit(f"launcher sweep exited {done.returncode}: {done.stderr.strip()[-2000:]}")
    jobs = len(list((work / name / "jobs").glob("*.sbatch")))
    assert source or jobs == ARRAYS, jobs  # one array per size (launcher/slurm/submit.py group_trials)
    return {"jobs": jobs, "render_s": None, "submit_s": t1 - t0, "total_s": t1 - t0, "cpu_s": cpu1 - cpu0}


def _children_cpu() -> float:
    """CPU seconds (user + system) of this process's waited-for children so far: a shell mode's own CPU,
    sbatch's included, which the machine's other work shares out but does not add to (wall time it does)."""
    used = resource.getrusage(resource.RUSAGE_CHILDREN)
    return used.ru_utime + used.ru_stime


def submitit_shell(work: Path, env: dict) -> dict:
    """benchmarks/submitit_sweep.py from the shell: the same 256 held trials, one `map_array` per size."""
    folder = Path(tempfile.mkdtemp(dir=work, prefix="submitit-"))
    cpu0, t0 = _children_cpu(), time.perf_counter()
    out = subprocess.run(
        [sys.executable, "-m", "benchmarks.submitit_sweep", str(folder)], env=env, check=True, capture_output=True
    )
    t1, cpu1 = time.perf_counter(), _children_cpu()
    ids = out.stdout.decode().split()
    subprocess.run(["scancel", *ids], env=env, check=True)
    assert len(ids) == ARRAYS, len(ids)
    return {"jobs": len(ids), "render_s": None, "submit_s": t1 - t0, "total_s": t1 - t0, "cpu_s": cpu1 - cpu0}


def submit_256(work: Path, env: dict) -> dict:
    """In process, after planning: render + write + sbatch every job of the 256-trial sweep."""
    cfg = compose_config(HELD + [f"sweep.results_dir={work}"])
    trials = sweep_trials(cfg)
    assert len(trials) == 256
    sweep_dir = create_sweep_dir(cfg, [(t, cfg) for t in trials], [])
    t0 = time.perf_counter()
    jobs = job_requests(cfg, sweep_dir, trials)
    write_scripts(sweep_dir, jobs)
    t1 = time.perf_counter()
    ids: list[str] = []
    submit_jobs(sweep_dir, jobs, env, on_submit=lambda job, job_id: ids.append(job_id))
    t2 = time.perf_counter()
    subprocess.run(["scancel", *ids], env=env, check=True)
    return {"jobs": len(jobs), "render_s": t1 - t0, "submit_s": t2 - t1, "total_s": t2 - t0}


def _task(i: int) -> int:
    """What submitit's array tasks would run (they are held and cancelled, so never)."""
    return i


def submitit_256(work: Path, env: dict) -> dict:
    """The same 256 tasks through submitit in process: one `map_array` of 64 per node count, `%4`, held."""
    os.environ["SLURM_CONF"] = env["SLURM_CONF"]  # submitit runs sbatch with this process's environment
    folder = Path(tempfile.mkdtemp(dir=work, prefix="submitit-"))
    t0 = time.perf_counter()
    jobs = []
    for nodes in (1, 2, 3, 4):
        ex = submitit.AutoExecutor(folder=folder / "%j", cluster="slurm")
        ex.update_parameters(
            slurm_partition="debug",
            nodes=nodes,
            tasks_per_node=1,
            timeout_min=10,
            slurm_array_parallelism=4,
            slurm_additional_parameters={"hold": True},
        )
        jobs += ex.map_array(_task, range(64))
    t1 = time.perf_counter()
    ids = sorted({j.job_id.split("_", 1)[0] for j in jobs})
    subprocess.run(["scancel", *ids], env=env, check=True)
    assert len(jobs) == 256 and len(ids) == 4
    return {"jobs": len(ids), "render_s": None, "submit_s": t1 - t0, "total_s": t1 - t0}  # it renders inside map_array


def first_step(work: Path, env: dict) -> dict:
    cfg = compose_config(
        ["cluster=devcluster", "sweep.nodes=[1]", "sweep.steps=3", "sweep.warmup_steps=1", f"sweep.results_dir={work}"]
    )
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
        start = subprocess.run(
            ["sacct", "-n", "-X", "-P", "--format=Start", "-j", job], env=env, capture_output=True, text=True
        ).stdout.strip()
        time.sleep(0.2)
    started = dt.datetime.fromisoformat(start).timestamp()  # whole seconds: sacct's resolution
    track(sweep_dir, cfg, trials, progress_bars=False)  # let the job end before its folder goes
    return {
        "submit_to_first_step_s": t_step - t0,
        "submit_to_start_s": started - t0,
        "start_to_first_step_s": t_step - started,
    }


def start_words(seconds: float) -> str:
    return "under 1 s" if seconds < 1 else f"{seconds:.0f} s"


MODES = (
    "launcher sweep (shell)",
    "submitit map_array (shell)",
    "launcher in process",
    "submitit map_array",
    "launcher sweep (shell, empty cache)",
)
BEFORE = "launcher before (shell)"


def run_mode(mode: str, work: Path, env: dict, r: int, before: Path | None = None) -> dict:
    if mode == "launcher sweep (shell)":
        return launcher_shell(work, env, r, cache=work / "cache")  # warmed by main() before the rounds
    if mode == "launcher sweep (shell, empty cache)":
        return launcher_shell(work, env, r)
    if mode == BEFORE:
        return launcher_shell(work, env, r, before)
    if mode == "submitit map_array (shell)":
        return submitit_shell(work, env)
    if mode == "submitit map_array":
        return submitit_256(work, env)
    return submit_256(work, env)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--first-step-runs", type=int, default=3)
    ap.add_argument("--before", type=Path, help="also time `launcher sweep` from this source tree (an older commit)")
    args = ap.parse_args()
    env = devcluster.up(log=lambda line: None).env()
    compile_sources(Path(launcher.__file__).resolve().parent)
    if args.before:
        compile_sources(args.before / "launcher")
    rounds, firsts = [], []
    load_before = os.getloadavg()[0]
    modes = MODES + ((BEFORE,) if args.before else ())
    with tempfile.TemporaryDirectory(dir="/var/tmp") as work:
        launcher_shell(Path(work), env, -1, cache=Path(work) / "cache")  # untimed: composes the recipe once
        for r in range(args.rounds):
            for mode in modes[r % len(modes) :] + modes[: r % len(modes)]:  # each mode first, second, … in turn
                res = run_mode(mode, Path(work), env, r, args.before) | {"mode": mode, "round": r}
                rounds.append(res)
                render = "—" if res["render_s"] is None else f"{res['render_s']:.3f} s"
                print(
                    f"round {r}: {mode:36s} {res['jobs']:3d} jobs render {render} submit {res['submit_s']:.3f} s "
                    f"total {res['total_s']:.3f} s",
                    flush=True,
                )
        for _ in range(args.first_step_runs):
            firsts.append(first_step(Path(work), env))
            print(f"first step: {firsts[-1]['submit_to_first_step_s']:.2f} s after sbatch", flush=True)
    summary = {
        mode: {
            k: _median([r.get(k) for r in rounds if r["mode"] == mode])
            for k in ("render_s", "submit_s", "total_s", "cpu_s")
        }
        for mode in modes
    }
    for mode in modes:
        summary[mode]["jobs"] = max(r["jobs"] for r in rounds if r["mode"] == mode)
    first = {k: statistics.median(f[k] for f in firsts) for k in firsts[0]} if firsts else None
    load_after = os.getloadavg()[0]
    result = {
        "benchmark": "slurm_submit",
        "measured_at": time.strftime("%Y-%m-%d %H:%M:%S %Z"),
        "trials": 256,
        "goal": "launcher sweep (shell) total_s <= 2 x submitit map_array (shell) total_s",
        "goal_ratio": GOAL_RATIO,
        "load_average_1min": {"start": load_before, "end": load_after},
        "median": summary,
        "first_step_median": first,
        "before": str(args.before) if args.before else None,
        "rounds": rounds,
        "first_step_runs": firsts,
    }
    atomic_write_json(HERE / "results" / "slurm_submit.json", result)
    lines = report(
        summary, first, args.rounds, args.first_step_runs, result["measured_at"], args.before, (load_before, load_after)
    )
    atomic_write_text(HERE / "results" / "slurm_submit.md", "\n".join(lines))
    print("\n".join(lines))


def _median(values: list[float | None]) -> float | None:
    known = [v for v in values if v is not None]
    return statistics.median(known) if known else None


def report(
    summary: dict,
    first: dict | None,
    rounds: int,
    first_runs: int,
    measured_at: str,
    before: Path | None = None,
    load: tuple[float, float] = (float("nan"), float("nan")),
) -> list[str]:
    shell, peer = summary["launcher sweep (shell)"], summary["submitit map_array (shell)"]
    inproc, arrays = summary["launcher in process"], summary["submitit map_array"]
    cold = summary["launcher sweep (shell, empty cache)"]
    ratio = shell["total_s"] / peer["total_s"]
    cold_ratio = cold["total_s"] / peer["total_s"]
    cold_met = f"within {GOAL_RATIO:.0f}×" if cold_ratio <= GOAL_RATIO else f"**above {GOAL_RATIO:.0f}×**"
    old = summary.get(BEFORE)
    met = "met" if ratio <= GOAL_RATIO else "**NOT met**"

    def row(label: str, jobs: int, m: dict) -> str:
        render = "—" if m["render_s"] is None else f"{m['render_s']:.3f}"
        cpu = "—" if m.get("cpu_s") is None else f"{m['cpu_s']:.3f}"
        return f"| {label} | {jobs} | {render} | {m['submit_s']:.3f} | {m['total_s']:.3f} | {cpu} |"

    if first is None:
        step = "sbatch → first training step: not measured (--first-step-runs 0)."
    else:
        step = (
            f"sbatch → first training step of a 1-node trial, median of {first_runs}: "
            f"**{first['submit_to_first_step_s']:.1f} s**, of which sbatch → job start "
            f"{start_words(first['submit_to_start_s'])} "
            "(sacct's Start has whole-second resolution) and the rest is the job script, srun and the payload's "
            "Python/torch import up to `step 1/`."
        )
    return [
        "# Slurm submission (dev cluster)",
        "",
        f"Submit a 256-trial sweep (4 sizes × 64 repeats, held), medians of {rounds} interleaved rounds:",
        "",
        "| mode | jobs | render s | sbatch s | total s | CPU s |",
        "|---|---|---|---|---|---|",
        row("`launcher sweep … --detach` from the shell (4 arrays `%4`), recipe composed before", ARRAYS, shell),
        row("the same with an empty composition cache (the recipes read and composed)", ARRAYS, cold),
        row("submitit 1.5.4 script from the shell: `map_array` per size (4 arrays `%4`)", ARRAYS, peer),
        row("launcher in process, after planning (job_requests + submit_jobs)", ARRAYS, inproc),
        row("submitit 1.5.4 in process: `map_array` per size", ARRAYS, arrays),
        *(
            [row(f"before: `launcher sweep … --detach` of {before.name} from the shell", old["jobs"], old)]
            if old
            else []
        ),
        "",
        f"Goal (issue 30 item 11), the launcher from the shell ≤ {GOAL_RATIO:.0f}× a submitit script submitting the "
        "same trials with `map_array`: "
        f"{shell['total_s']:.2f} s vs {peer['total_s']:.2f} s, ratio {ratio:.2f} — {met}, for a recipe composed "
        "before (a user's earlier submission of it, as jinja's compiled template below is an earlier run's). With an "
        "empty composition cache (the first command after an install, a recipe edit, or with new group choices): "
        f"{cold['total_s']:.2f} s, ratio {cold_ratio:.2f} — {cold_met}.",
        "",
        "Composing without Hydra (launcher/config/compose.py; docs/recipes.md): for a command of group choices "
        "(`cluster=devcluster`) and plain values (`sweep.repeats=64`, `sweep.nodes=[1,2,3,4]`, "
        "`sweep.results_dir=…`), the recipe files, plain YAML, are read in the defaults list's order "
        "(launcher/config/plain_compose.py) and the document of the group choices is kept on disk "
        "(launcher/config/composed_cache.py, keyed on every recipe file's name, size and mtime, the launcher's "
        "config code and Hydra's version); the values are set on it, `${…}` resolved and the config built from "
        "it without OmegaConf's structured schema (launcher/config/typed_document.py). "
        "tests/unit/test_compose_cache.py holds the config equal to Hydra's road, for every bundled option. The "
        "benchmark gives the first mode its own cache, filled by one untimed command before the rounds, as a "
        "user's earlier submission of the recipe fills theirs; the empty-cache mode starts each command with a "
        "new, empty one.",
        "",
        "The launcher submits the repeats of each size as one job array (launcher/slurm/submit.py group_trials), "
        "throttled to 4 running at once (`#SBATCH --array=0-63%4`, sweep.array_throttle), so the sizes run side "
        "by side, each 4 repeats at a time, and drift over the sweep hits every size alike; its peer, "
        "benchmarks/submitit_sweep.py, submits the same 4 arrays through `map_array` with "
        "`slurm_array_parallelism=4`. Both are 4 sbatch calls, and in process the launcher's render and submit "
        f"take {inproc['total_s']:.2f} s against submitit's {arrays['total_s']:.2f} s: what remains of the launcher's "
        "time from the shell is CPU work before the first sbatch. Its interpreter's imports: jinja2 for the job "
        "script; omegaconf (and the yaml and antlr4 it loads) only to read recipe files (an empty cache), hydra only "
        "for recipes or overrides outside the plain subset (a `--detach` submission "
        "loads neither pandas, pyarrow and numpy, nor rich, the dev cluster's code or the local executor: "
        "tests/slurm/test_detach_imports.py; the submitit script imports submitit alone). On Hydra's road, OmegaConf's "
        "structured schemas (~30-60 ms each to build, open and closed) and merges; the cache's road builds the "
        "config from the kept document without them (launcher/config/typed_document.py). Planning all 256 trials, "
        "each checked before any is submitted. Creating 256 trial folders, "
        "their trial.json and, after each sbatch, their submission.json copies (a file creation is ~0.1-0.3 ms on "
        "this disk; each distinct config's JSON is encoded once and spliced into its trials' trial.json).",
        "",
        f"CPU (user + system of the command and its sbatch calls, medians): launcher {shell['cpu_s']:.2f} s, "
        f"submitit {peer['cpu_s']:.2f} s, ratio {shell['cpu_s'] / peer['cpu_s']:.2f}. The machine's other work "
        f"(1-minute load average {load[0]:.1f} at the start, {load[1]:.1f} at the end, on 2 cores) stretches "
        "the launcher's longer CPU work more than submitit's short bursts between its sbatch calls, so the wall "
        "ratio grows with the load.",
        "",
        "The launcher's time includes what makes resume exact: per job, one fsync'd record before "
        "its sbatch and one after (jobs/<job>.submitted.json, naming the array's trials in task order), each "
        "trial's trial.json and the sweep's sweep.json (the resolved config, converted once per distinct config; "
        "made durable together by one syncfs before they are renamed into place, sweep.json last, where one fsync "
        "each cost 1.4–2.4 s on this disk) and submission.json. submitit's includes pickling each task and "
        "rendering its script. Both run compiled bytecode: the benchmark byte-compiles the launcher's package "
        "first, as `pip install` does (this machine sets PYTHONDONTWRITEBYTECODE, so a source checkout would "
        "compile its ~70 modules on every run), and after a first run jinja's bytecode cache keeps the job "
        "template's compiled code (launcher/slurm/render.py).",
        "",
        step,
        "",
        f"Measured {measured_at} on the dev cluster (4 nodes in network namespaces on one 2-core machine, "
        "shared with other work: absolute times are noisy, the ratio of interleaved rounds less so). "
        "Jobs of part 1 were submitted with --hold and cancelled, so none ran.",
        "",
        "Reproduce: `launcher cluster up && .venv/bin/python -m benchmarks.slurm_submit` (`--before DIR` also times "
        "`launcher sweep` from an older source tree, e.g. `git archive <commit> | tar -x -C DIR`)",
        "",
    ]


if __name__ == "__main__":
    main()
