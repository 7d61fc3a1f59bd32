"""`launcher plan --search` speed: llama3_70b at 8..16,384 GPUs (doubling) on one core, target ≤ 10 s.

Times the search itself (launcher.perf.search.search: candidates, sweep checks, memory estimates,
predictions) after composing the config once, best of REPEATS runs, with torch's and numpy's
threads pinned to one (OMP/MKL/OPENBLAS_NUM_THREADS=1 set before numpy loads: run it as a module
so nothing imported it earlier). Writes benchmarks/results/plan_search_speed.md with met / NOT met.

    python -m benchmarks.plan_search_speed
"""

from __future__ import annotations

import os

for _var in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS"):
    os.environ.setdefault(_var, "1")  # one core, before numpy is imported below

import platform  # noqa: E402
import time  # noqa: E402
from pathlib import Path  # noqa: E402

from launcher.config.compose import compose_config  # noqa: E402
from launcher.io import atomic_write_text  # noqa: E402
from launcher.perf.search import search  # noqa: E402

RESULTS = Path(__file__).resolve().parent / "results"
TARGET_S = 10.0
REPEATS = 3
OVERRIDES = [
    "model=llama3_70b",
    "precision=bf16",
    "batch.global_batch=1024",
    "cluster=example_gpu_site",
    "cluster.device_name=H100-SXM",
    "cluster.peak_flops_per_device=null",
    "cluster.nics_per_node=8",
]
SIZES = [8 * 2**i for i in range(12)]  # 8 .. 16384


def main() -> int:
    if hasattr(os, "sched_setaffinity"):
        os.sched_setaffinity(0, {min(os.sched_getaffinity(0))})  # one core, whatever the machine has
    cfg = compose_config(OVERRIDES)
    times, found = [], None
    for _ in range(REPEATS):
        start = time.perf_counter()
        found = search(cfg, SIZES, assume_mfu=None)
        times.append(time.perf_counter() - start)
    assert found is not None
    best = min(times)
    total = sum(len(s.ranked) + len(s.dropped) for s in found.sizes)
    met = "met" if best <= TARGET_S else "NOT met"
    lines = [
        "# `launcher plan --search` speed",
        "",
        f"Measured {time.strftime('%Y-%m-%d %H:%M:%S %Z')} on {platform.platform()} (Python "
        f"{platform.python_version()}), pinned to one core, by `python -m benchmarks.plan_search_speed`.",
        "",
        f"`launcher plan --search {' '.join(OVERRIDES)} --gpus 8..16384` (12 sizes): the search took "
        f"**{best:.2f} s** (best of {REPEATS}: {', '.join(f'{t:.2f}' for t in times)} s) for {total} candidates "
        f"estimated (those a sweep would refuse, and larger micro-batches of a group already over the memory "
        f"limit, are skipped before any estimate). Target ≤ {TARGET_S:.0f} s: **{met}**.",
        "",
        "| GPUs | candidates that fit | over the memory limit | best |",
        "|---|---|---|---|",
        *(
            f"| {s.world_size} | {len(s.ranked)} | {len(s.dropped)} | "
            f"{s.ranked[0].candidate.label + f' ({s.ranked[0].tokens_per_s:,.0f} tokens/s)' if s.ranked else '—'} |"
            for s in found.sizes
        ),
    ]
    atomic_write_text(RESULTS / "plan_search_speed.md", "\n".join(lines) + "\n")
    print("\n".join(lines))
    return 0 if best <= TARGET_S else 1


if __name__ == "__main__":
    raise SystemExit(main())
