"""Harness overhead: a launcher trial vs a minimal hand-written DDP loop (hand_ddp.py).

Same model (tiny_gpt), micro-batch, ranks, steps and warm-up; each round runs both, in
alternating order, and takes the ratio of their measured tokens/s (launcher ÷ hand). The
median ratio over rounds is the figure; goal ≥ 0.98. Writes
benchmarks/results/harness_overhead.{json,md}.

    .venv/bin/python -m benchmarks.harness_overhead [--rounds 7] [--ranks 2] [--steps 60]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from launcher.config.compose import compose_config
from launcher.io import atomic_write_json, atomic_write_text, read_json
from launcher.run.local import free_port, rank_env, run_local
from launcher.trials.folder import trial_document
from launcher.trials.spec import make_trial

HERE = Path(__file__).resolve().parent

GOAL = 0.98


def launcher_trial(work: Path, ranks: int, micro: int, steps: int, warmup: int) -> float:
    cfg = compose_config([f"batch.micro={micro}"])
    trial = make_trial(cfg, index=0, world_size=ranks, steps=steps, warmup_steps=warmup)
    tdir = Path(tempfile.mkdtemp(dir=work))
    atomic_write_json(tdir / "trial.json", trial_document(trial, cfg))
    out = run_local(tdir, world_size=ranks, threads=1, timeout_s=600)
    if not out.ok:
        raise SystemExit(f"launcher trial failed: {out.reason()}")
    return read_json(tdir / "record.json")["metrics"]["tokens_per_s"]


def hand_loop(ranks: int, micro: int, steps: int, warmup: int) -> float:
    port = free_port()
    argv = [sys.executable, "-m", "benchmarks.hand_ddp", str(micro), str(steps), str(warmup)]
    procs = [
        subprocess.Popen(argv, env=rank_env(r, ranks, port, 1), stdout=subprocess.PIPE, text=True) for r in range(ranks)
    ]
    outs = [p.communicate()[0] for p in procs]
    if any(p.returncode for p in procs):
        raise SystemExit(f"hand loop failed: exit codes {[p.returncode for p in procs]}")
    return json.loads(outs[0].strip().splitlines()[-1])["tokens_per_s"]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--ranks", type=int, default=2)
    ap.add_argument("--micro", type=int, default=8)
    ap.add_argument("--steps", type=int, default=60)
    ap.add_argument("--warmup", type=int, default=10)
    args = ap.parse_args()
    os.environ["PYTHONPATH"] = os.pathsep.join(filter(None, [str(HERE.parent), os.environ.get("PYTHONPATH")]))

    from rich.progress import track

    rounds = []
    with tempfile.TemporaryDirectory() as work:
        for i in track(range(args.rounds), description="rounds"):
            order = ["launcher", "hand"] if i % 2 == 0 else ["hand", "launcher"]
            thr = {}
            for who in order:
                if who == "launcher":
                    thr[who] = launcher_trial(Path(work), args.ranks, args.micro, args.steps, args.warmup)
                else:
                    thr[who] = hand_loop(args.ranks, args.micro, args.steps, args.warmup)
            rounds.append({"order": order, **thr, "ratio": thr["launcher"] / thr["hand"]})
            print(
                f"round {i + 1}: launcher {thr['launcher']:.0f} tok/s, hand {thr['hand']:.0f} tok/s, "
                f"ratio {rounds[-1]['ratio']:.3f}",
                flush=True,
            )
    ratios = [r["ratio"] for r in rounds]
    result = {
        "benchmark": "harness_overhead",
        "measured_at": time.strftime("%Y-%m-%d %H:%M:%S %Z"),
        "machine": {"cpus": os.cpu_count(), "platform": platform.platform(), "python": platform.python_version()},
        "setup": vars(args) | {"model": "tiny_gpt", "backend": "gloo", "threads_per_rank": 1},
        "method": "interleaved rounds (order alternates); per round tokens/s of a launcher trial and of "
        "benchmarks/hand_ddp.py, each from the median post-warm-up step time where a step ends when its "
        "slowest rank does; figure = median over rounds of launcher ÷ hand",
        "rounds": rounds,
        "median_ratio": statistics.median(ratios),
        "min_ratio": min(ratios),
        "max_ratio": max(ratios),
        "goal": GOAL,
        "meets_goal": statistics.median(ratios) >= GOAL,
    }
    out = HERE / "results"
    atomic_write_json(out / "harness_overhead.json", result)
    lines = [
        "# Harness overhead",
        "",
        f"Launcher trial ÷ hand-written DDP loop, tokens/s: **median {result['median_ratio']:.3f}** "
        f"(min {result['min_ratio']:.3f}, max {result['max_ratio']:.3f}) over {args.rounds} rounds; "
        f"goal ≥ {GOAL} → {'met' if result['meets_goal'] else 'NOT met'}.",
        "",
        f"Measured {result['measured_at']} on {os.cpu_count()} CPUs, {args.ranks} ranks (gloo, 1 thread each), "
        f"tiny_gpt, micro-batch {args.micro}, {args.steps} steps of which {args.warmup} warm-up.",
        "",
        f"Method: {result['method']}.",
        "",
        "| round | order | launcher tok/s | hand tok/s | ratio |",
        "|---|---|---|---|---|",
        *[
            f"| {i + 1} | {' → '.join(r['order'])} | {r['launcher']:.0f} | {r['hand']:.0f} | {r['ratio']:.3f} |"
            for i, r in enumerate(rounds)
        ],
        "",
        "Reproduce: `.venv/bin/python -m benchmarks.harness_overhead`",
        "",
    ]
    atomic_write_text(out / "harness_overhead.md", "\n".join(lines))
    print(f"median ratio {result['median_ratio']:.3f} (goal ≥ {GOAL}) → {out / 'harness_overhead.md'}")


if __name__ == "__main__":
    main()
