"""train.compile=true with inductor, the backend real runs compile with: does the compiled
tiny_gpt train as the eager one does, is the compilation booked to warm-up, and what does it
cost and give on this machine's CPU?

One rank in this process (a 1-rank gloo group), tiny_gpt, AdamW, the same seed: an eager run,
then a compiled run with `launcher.train.compiling.BACKEND` (inductor). The suite's test
(tests/unit/test_compile.py) checks the same with aot_eager, which leaves out inductor's C++ build:
tens of seconds cold on a 2-core machine, past the suite's budget, hence a benchmark. The eager run is
the truth; nothing here is predicted.

Goals (a miss is written "NOT met"): losses within 1e-5 relative of eager at every step
(inductor may reorder fp32 reductions: a few ulps per op); all compile time inside warm-up
(compile_after_warmup_s = 0). Reported, no goal: compile seconds (cold unless inductor's cache
under /tmp is warm: the run says which it found) and the median timed step, eager vs compiled.

    .venv/bin/python -m benchmarks.compile_inductor [--steps 12] [--warmup 4]

Writes benchmarks/results/compile_inductor.{md,json}.
"""

from __future__ import annotations

import argparse
import platform
import statistics
import sys
import time
from pathlib import Path

import torch
import torch.distributed as dist

from launcher.config.compose import compose_config
from launcher.io import atomic_write_json, atomic_write_text
from launcher.train import compiling, loop
from launcher.train.env import RankEnv
from launcher.trials.spec import make_trial

HERE = Path(__file__).resolve().parent

OUT = HERE / "results"
CPU = torch.device("cpu")
LOSS_RTOL = 1e-5


def trained(compile_: bool, steps: int, warmup: int):
    """(compile figures, each step's loss, each step's seconds) of tiny_gpt on 1 rank in this
    process (a 1-rank process group must exist)."""
    cfg = compose_config(["model=tiny_gpt", f"train.compile={str(compile_).lower()}", "batch.micro=4"])
    cfg = loop.with_precision(cfg, CPU)
    trial = make_trial(cfg, index=0, world_size=1, steps=steps, warmup_steps=warmup)
    renv = RankEnv(rank=0, local_rank=0, world_size=1, master_addr="127.0.0.1", master_port=0, sources={})
    run = loop.build(trial, cfg, renv, CPU, checkpoint_dir=None, stop=None, log=lambda *a, **k: None)
    done = loop.run_steps(run, start_step=0)
    figures = compiling.compile_metrics(
        run.compile_clock, units=run.compiled_units, first_timed_step=warmup, device=CPU
    )
    return figures, [float(loss) for loss in done.step_losses], done.step_times


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=12)
    ap.add_argument("--warmup", type=int, default=4)
    args = ap.parse_args()
    cache = Path(f"/tmp/torchinductor_{__import__('getpass').getuser()}")
    warm_cache = cache.exists() and any(cache.iterdir())
    dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
    try:
        _, eager_losses, eager_times = trained(False, args.steps, args.warmup)
        started = time.perf_counter()
        figures, losses, times = trained(True, args.steps, args.warmup)
        wall = time.perf_counter() - started
    finally:
        dist.destroy_process_group()
    worst = max(abs(a - b) / abs(b) for a, b in zip(losses, eager_losses, strict=True))
    timed = slice(args.warmup, None)
    result = {
        "how": f"`.venv/bin/python -m benchmarks.compile_inductor --steps {args.steps} --warmup {args.warmup}`",
        "backend": compiling.BACKEND,
        "torch": torch.__version__,
        "python": platform.python_version(),
        "threads": torch.get_num_threads(),
        "measured_at": time.strftime("%Y-%m-%d %H:%M:%S %Z"),
        "inductor_cache_warm_before": warm_cache,
        **figures,
        "compiled_run_wall_s": wall,
        "eager_losses": eager_losses,
        "compiled_losses": losses,
        "max_loss_rel_diff": worst,
        "eager_step_s_median": statistics.median(eager_times[timed]),
        "compiled_step_s_median": statistics.median(times[timed]),
    }
    goals = {
        f"losses within {LOSS_RTOL:g} relative of eager at every step": worst <= LOSS_RTOL,
        "all compile time inside warm-up (compile_after_warmup_s = 0)": figures["compile_after_warmup_s"] == 0,
    }
    result["goals"] = {k: ("met" if ok else "NOT met") for k, ok in goals.items()}
    OUT.mkdir(exist_ok=True)
    atomic_write_json(OUT / "compile_inductor.json", result)
    atomic_write_text(OUT / "compile_inductor.md", report(result))
    print(report(result))
    return 0 if all(goals.values()) else 1


def report(r: dict) -> str:
    lines = [
        "# train.compile=true with inductor (tiny_gpt, 1 rank, CPU)",
        "",
        f"Reproduce: {r['how']} — {r['measured_at']}, torch {r['torch']}, {r['threads']} threads; "
        f"inductor's cache {'warm' if r['inductor_cache_warm_before'] else 'cold'} at the start.",
        "",
        "| goal | result |",
        "|---|---|",
        *(f"| {goal} | {verdict} |" for goal, verdict in r["goals"].items()),
        "",
        f"- compile_s: {r['compile_s']:.1f} s over {r['compiled_units']} units "
        f"(after warm-up: {r['compile_after_warmup_s']:.1f} s)",
        f"- largest loss difference from eager: {r['max_loss_rel_diff']:.2e} relative",
        f"- median timed step: eager {r['eager_step_s_median'] * 1e3:.1f} ms, compiled "
        f"{r['compiled_step_s_median'] * 1e3:.1f} ms (a 2-layer toy on CPU: says nothing of a GPU's speed-up)",
        "",
    ]
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
