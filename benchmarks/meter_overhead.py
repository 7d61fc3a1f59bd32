"""Meter overhead: what `launcher.meter.step` costs inside the user's program.

examples/ddp_meter's training loop (its own model, step and DDP setup, imported from its train.py) run
under torchrun, its optimizer steps interleaved one by one between calling `meter.step(tokens=n)` after
the step (writing to a real LAUNCHER_METER_FILE, as under launcher) and not calling it — the only
difference — in the order meter, plain, plain, meter, … so each comes first as often as second and a drift
in the machine's speed falls on both. Each step is timed on rank 0 (the one that writes). Steps 2k and 2k+1
are one of each kind, side by side, so they share the machine's load of the moment: the figure is the
median over every such pair of every launch of meter ÷ plain tokens/s (plain step seconds ÷ meter step
seconds, the same tokens in both); goal ≥ 0.99. Each launch also times 20,000
bare `meter.step` calls, the cost with no training around it. Writes benchmarks/results/meter_overhead.{json,md}.

    python -m benchmarks.meter_overhead [--runs 3] [--ranks 2] [--steps 1000]
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from launcher import meter
from launcher.io import atomic_write_json, atomic_write_text

HERE = Path(__file__).resolve().parent
TRAIN = HERE.parent / "examples" / "ddp_meter" / "train.py"
GOAL = 0.99
BARE_CALLS = 20_000


def _example():
    """examples/ddp_meter/train.py as a module (examples/ is not a package)."""
    spec = importlib.util.spec_from_file_location("ddp_meter_train", TRAIN)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _interleaved(step, tokens_per_step: int, steps: int) -> dict[str, list[float]]:
    """Seconds of each of `steps` optimizer steps, by kind: "meter" (meter.step after it) or "plain"."""
    times: dict[str, list[float]] = {"meter": [], "plain": []}
    for i in range(steps):
        metered = i % 4 in (0, 3)
        start = time.perf_counter()
        step()
        if metered:
            meter.step(tokens=tokens_per_step)
        times["meter" if metered else "plain"].append(time.perf_counter() - start)
    return times


def _bare_call_s(path: Path) -> float:
    """Seconds of one meter.step call writing to `path`, with nothing else running in the loop."""
    os.environ[meter.ENV_FILE] = str(path)
    start = time.perf_counter()
    for _ in range(BARE_CALLS):
        meter.step(tokens=1)
    return (time.perf_counter() - start) / BARE_CALLS


def worker(args: argparse.Namespace) -> None:
    """One torchrun rank: the example's loop in alternating blocks; rank 0 prints one JSON line."""
    train = _example()
    opts = train.parse([f"--micro={args.micro}", f"--seq-len={args.seq_len}"])
    rank, world, device = train.setup()
    model, optimizer = train.build(opts, device)
    step = train.make_step(opts, model, optimizer, rank, device)
    tokens_per_step = opts.micro * opts.accum * opts.seq_len * world
    for _ in range(args.warmup_steps):
        step()
    times = _interleaved(step, tokens_per_step, args.steps)
    if rank == 0:
        bare = _bare_call_s(Path(os.environ[meter.ENV_FILE]).with_suffix(".bare.jsonl"))
        record = {"step_s": times, "tokens_per_step": tokens_per_step, "bare_call_s": bare, "device": str(device)}
        print(json.dumps(record), flush=True)
    train.dist.destroy_process_group()


def run_once(args: argparse.Namespace, work: Path) -> dict:
    """One torchrun launch of the worker; rank 0's JSON line."""
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join(filter(None, [str(HERE.parent), os.environ.get("PYTHONPATH")])),
        meter.ENV_FILE: str(work / "meter.jsonl"),
    }
    torchrun = Path(sys.executable).parent / "torchrun"
    argv = [str(torchrun), "--standalone", f"--nproc-per-node={args.ranks}", "-m", "benchmarks.meter_overhead"]
    flags = ["--worker", f"--steps={args.steps}"]
    flags += [f"--warmup-steps={args.warmup_steps}", f"--micro={args.micro}", f"--seq-len={args.seq_len}"]
    done = subprocess.run([*argv, *flags], env=env, cwd=HERE.parent, capture_output=True, text=True, timeout=1200)
    if done.returncode:
        raise SystemExit(f"torchrun exited {done.returncode}:\n{done.stderr[-3000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def parse(argv: list[str] | None = None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--runs", type=int, default=3, help="torchrun launches")
    ap.add_argument("--ranks", type=int, default=2)
    ap.add_argument("--steps", type=int, default=1000, help="timed optimizer steps a launch, half of each kind")
    ap.add_argument("--warmup-steps", type=int, default=5, help="untimed steps first")
    ap.add_argument("--micro", type=int, default=4)
    ap.add_argument("--seq-len", type=int, default=64)
    ap.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    return ap.parse_args(argv)


def main() -> None:
    args = parse()
    if args.worker:
        worker(args)
        return
    runs = []
    for i in range(args.runs):
        with tempfile.TemporaryDirectory() as work:
            runs.append(run_once(args, Path(work)))
        print(f"launch {i + 1}: meter ÷ plain {_rates(runs[-1])['ratio']:.4f}", flush=True)
    write(args, runs)


def _pair_ratios(run: dict) -> list[float]:
    """meter ÷ plain tokens/s of each side-by-side pair of steps (the k-th of each kind: steps 2k, 2k+1)."""
    return [plain / metered for metered, plain in zip(run["step_s"]["meter"], run["step_s"]["plain"])]


def _rates(run: dict) -> dict[str, float]:
    """A launch's tokens/s of each kind from its median step time, and its median pair ratio."""
    out = {k: run["tokens_per_step"] / statistics.median(v) for k, v in run["step_s"].items()}
    return out | {"ratio": statistics.median(_pair_ratios(run))}


def summary(args: argparse.Namespace, runs: list[dict]) -> dict:
    pooled = {k: [s for r in runs for s in r["step_s"][k]] for k in ("meter", "plain")}
    medians = {k: runs[0]["tokens_per_step"] / statistics.median(v) for k, v in pooled.items()}
    pairs = [x for r in runs for x in _pair_ratios(r)]
    bare = statistics.median(r["bare_call_s"] for r in runs)
    ratio = statistics.median(pairs)
    return {
        "benchmark": "meter_overhead",
        "measured_at": time.strftime("%Y-%m-%d %H:%M:%S %Z"),
        "machine": {"cpus": os.cpu_count(), "platform": platform.platform(), "python": platform.python_version()},
        "load_average": os.getloadavg(),
        "device": runs[0]["device"],
        "setup": {k: v for k, v in vars(args).items() if k != "worker"} | {"program": "examples/ddp_meter/train.py"},
        "method": "torchrun launches of examples/ddp_meter's loop; optimizer steps interleaved meter, plain, plain, "
        "meter, … where a meter step calls launcher.meter.step(tokens=n) after it (rank 0 writing a real meter "
        "file) and a plain one does not; each step timed on rank 0; figure = median over the side-by-side pairs "
        "(one step of each kind) of meter ÷ plain tokens/s",
        "runs": [r | {"tokens_per_s": _rates(r)} for r in runs],
        "pairs": len(pairs),
        "ratio": ratio,
        "meter_tokens_per_s_median_step": medians["meter"],
        "plain_tokens_per_s_median_step": medians["plain"],
        "ratio_of_median_steps": medians["meter"] / medians["plain"],
        "ratio_of_means": sum(pooled["plain"]) / sum(pooled["meter"]),
        "bare_call_us": bare * 1e6,
        "bare_call_share_of_step": bare * medians["plain"] / runs[0]["tokens_per_step"],
        "goal": GOAL,
        "meets_goal": ratio >= GOAL,
    }


def write(args: argparse.Namespace, runs: list[dict]) -> None:
    result = summary(args, runs)
    out = HERE / "results"
    atomic_write_json(out / "meter_overhead.json", result)
    half = args.steps // 2
    lines = [
        "# Meter overhead",
        "",
        f"Tokens/s with `meter.step` ÷ without, examples/ddp_meter's loop: **{result['ratio']:.4f}**, the median over "
        f"{result['pairs']} side-by-side pairs of steps ({args.runs} launches × {half}); goal ≥ {GOAL} → "
        f"{'met' if result['meets_goal'] else 'NOT met'}. From the median step time of each kind: "
        f"{result['meter_tokens_per_s_median_step']:.0f} ÷ {result['plain_tokens_per_s_median_step']:.0f} tokens/s = "
        f"{result['ratio_of_median_steps']:.4f}; from the total time of each kind: {result['ratio_of_means']:.4f}.",
        "",
        f"One bare `meter.step` call (rank 0, writing and flushing its line): {result['bare_call_us']:.1f} µs, "
        f"{100 * result['bare_call_share_of_step']:.3f}% of a median plain step: the figure above is the machine's "
        "noise around a cost of that size.",
        "",
        f"Measured {result['measured_at']} on {os.cpu_count()} CPUs ({platform.platform()}), device "
        f"{result['device']}, {args.ranks} ranks under torchrun (gloo on CPU; torchrun's one thread a rank), "
        f"micro-batch {args.micro} × {args.seq_len} tokens a rank, {args.runs} launches of {args.steps} timed steps "
        f"after {args.warmup_steps} untimed ones. The machine is shared with other work (load average "
        f"{result['load_average'][0]:.1f} at the end on {os.cpu_count()} CPUs), so single steps are noisy.",
        "",
        f"Method: {result['method']}.",
        "",
        "| launch | meter tok/s (median step) | plain tok/s (median step) | median pair meter ÷ plain |",
        "|---|---|---|---|",
        *[
            f"| {i + 1} | {r['tokens_per_s']['meter']:.0f} | {r['tokens_per_s']['plain']:.0f} | "
            f"{r['tokens_per_s']['ratio']:.4f} |"
            for i, r in enumerate(result["runs"])
        ],
        "",
        "Reproduce: `python -m benchmarks.meter_overhead "
        f"--runs {args.runs} --ranks {args.ranks} --steps {args.steps}`",
        "",
    ]
    atomic_write_text(out / "meter_overhead.md", "\n".join(lines))
    print(f"meter ÷ plain {result['ratio']:.4f} (goal ≥ {GOAL}) → {out / 'meter_overhead.md'}")


if __name__ == "__main__":
    main()
