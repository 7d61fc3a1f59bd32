"""GPU smoke test: one real 1-rank NCCL trial of gpt_125m on one GPU, precision `auto` (bf16 on CUDA).

The trial runs through the real payload (`python -m launcher.train`, started by
launcher.run.local.run_local from a trial.json, as `launcher sweep` does), DDP layout, the
cluster's device name left unset so that the payload looks the GPU up in the peak table
(launcher/model/peaks.py) by the name torch reports. It writes benchmarks/results/gpu_smoke.{md,json}:
how it was run, the device, torch and CUDA versions, MFU against the table's peak, tokens/s, step
times, CUDA memory figures and the all-reduce probe, and checks that the record says NCCL, bf16,
CUDA-event timing and a table peak. Without a GPU (torch.cuda.is_available() false) it writes
"NOT run: no GPU" to the same files and exits 0.

    .venv/bin/python benchmarks/gpu_smoke.py [--steps 30] [--warmup 10] [--micro 8]
"""

from __future__ import annotations

import argparse
import os
import platform
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import torch

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

from launcher.config.compose import compose_config  # noqa: E402
from launcher.io import atomic_write_json, atomic_write_text, read_json  # noqa: E402
from launcher.run.local import run_local  # noqa: E402
from launcher.trials.folder import trial_document  # noqa: E402
from launcher.trials.spec import make_trial  # noqa: E402

OUT = HERE / "results"
REPRODUCE = "`.venv/bin/python benchmarks/gpu_smoke.py` (on a machine with one CUDA GPU and a CUDA build of torch)"


def overrides(micro: int) -> list[str]:
    """The trial's config: `precision=auto` so the payload's own per-device choice is what runs."""
    return ["model=gpt_125m", "parallel=ddp", f"batch.micro={micro}", "batch.accum=1", "cluster.device=cuda",
            "precision=auto", "optim=adamw", "seed=0"]  # fmt: skip


def environment() -> dict[str, Any]:
    return {
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "cuda_available": torch.cuda.is_available(),
        "device_name": torch.cuda.get_device_name(0) if torch.cuda.is_available() else None,
        "python": platform.python_version(),
        "platform": platform.platform(),
        "measured_at": time.strftime("%Y-%m-%d %H:%M:%S %Z"),
    }


def run_trial(args: argparse.Namespace) -> tuple[dict[str, Any] | None, str | None]:
    """(record, failure reason) of the 1-rank trial."""
    cfg = compose_config(overrides(args.micro))
    trial = make_trial(cfg, index=0, world_size=1, steps=args.steps, warmup_steps=args.warmup)
    with tempfile.TemporaryDirectory() as work:
        tdir = Path(work) / trial.trial_id
        tdir.mkdir()
        atomic_write_json(tdir / "trial.json", trial_document(trial, cfg))
        out = run_local(tdir, world_size=1, threads=cfg.cluster.threads_per_rank, timeout_s=cfg.cluster.trial_timeout_s)
        record = read_json(tdir / "record.json") if (tdir / "record.json").exists() else None
        log = (tdir / "rank0.log").read_text(errors="replace")[-2000:] if (tdir / "rank0.log").exists() else ""
    if record is None or record.get("status") != "completed":
        why = out.reason() or (record or {}).get("reason") or "no record"
        return record, f"{why}\n\nrank 0 log (tail):\n{log}"
    return record, None


def checks(record: dict[str, Any]) -> list[tuple[str, bool]]:
    """What a GPU run must show: the defaults that change on CUDA, and an MFU with a named peak."""
    m = record["metrics"]
    return [
        ("backend is nccl", record.get("backend") == "nccl"),
        ("precision auto resolved to bf16", m.get("precision") == "bf16"),
        ("step times from CUDA events", m.get("step_timing") == "cuda_events"),
        ("peak from the table for the detected device",
         m.get("peak_source") not in (None, "cluster.peak_flops_per_device") and m.get("mfu") is not None),
        ("mfu in (0, 1]", m.get("mfu") is not None and 0 < m["mfu"] <= 1),
        ("losses finite and falling", m["loss_last"] < m["loss_first"]),
    ]


def figures(record: dict[str, Any]) -> dict[str, Any]:
    """The record's figures the smoke test reports (memory: every memory figure the record has)."""
    m = record["metrics"]
    keep = ("precision", "matmul_dtype", "cuda_device_name", "mfu", "peak_flops_per_device", "peak_source",
            "peak_device", "peak_mismatch", "tokens_per_s", "samples_per_s", "step_time_median_s", "step_time_p10_s",
            "step_time_p90_s", "steps_measured", "step_timing", "flops_per_token", "params", "allreduce_bytes",
            "allreduce_time_s", "algbw_gbps", "busbw_gbps", "allreduce_probe", "compute_time_s", "loss_first",
            "loss_last")  # fmt: skip
    out = {k: m.get(k) for k in keep}
    out.update({k: v for k, v in m.items() if is_memory(k)})
    return out


def is_memory(key: str) -> bool:
    """peak_memory_bytes/kind, cuda_peak_allocated_bytes, cuda_peak_reserved_bytes, host_peak_rss_bytes, …"""
    return "memory" in key or "_peak_" in key


def not_run_lines(env: dict[str, Any], args: argparse.Namespace) -> list[str]:
    return [
        "# GPU smoke test", "",
        "**NOT run: no GPU.** `torch.cuda.is_available()` is false on this machine "
        f"(torch {env['torch']}, CUDA build: {env['cuda'] or 'none'}; {env['platform']}; {env['measured_at']}).",
        "Nothing below has been measured on a GPU yet: no MFU, memory or NCCL figure exists for this code.", "",
        f"What it runs when a GPU is there: one rank, `{' '.join(overrides(args.micro))}`, {args.steps} steps "
        f"({args.warmup} warm-up), through the real payload (`python -m launcher.train` via "
        "launcher.run.local.run_local), and it checks: backend nccl, precision auto → bf16, step times from CUDA "
        "events, MFU against the peak table's figure for the device torch reports.", "",
        f"Reproduce: {REPRODUCE}", "",
    ]  # fmt: skip


def ran_lines(env: dict[str, Any], args: argparse.Namespace, record: dict[str, Any]) -> list[str]:
    f, v = figures(record), record.get("versions", {})
    mem = {k: x for k, x in f.items() if is_memory(k)}
    probe = f["allreduce_probe"] or "none (1 rank: nothing to all-reduce)"
    ok = checks(record)
    return [
        "# GPU smoke test", "",
        f"Measured {env['measured_at']} on **{env['device_name']}** (torch {v.get('torch')}, CUDA {v.get('cuda')}; "
        f"{env['platform']}): one rank, `{' '.join(overrides(args.micro))}`, {args.steps} steps, the first "
        f"{args.warmup} excluded, through the real payload (launcher.run.local.run_local → `python -m launcher.train`).",
        "",
        "| figure | value |", "|---|---|",
        *[f"| {k} | {x} |" for k, x in f.items() if not is_memory(k) and k != "allreduce_probe"],
        *[f"| {k} | {x} |" for k, x in mem.items()],
        f"| allreduce_probe [ranks, bytes, s] | {probe} |", "",
        "Checks:", "", *[f"- {'PASS' if good else 'FAIL'}: {name}" for name, good in ok], "",
        f"Reproduce: {REPRODUCE}", "",
    ]  # fmt: skip


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--steps", type=int, default=30)
    ap.add_argument("--warmup", type=int, default=10)
    ap.add_argument("--micro", type=int, default=8)
    args = ap.parse_args()
    os.environ["PYTHONPATH"] = os.pathsep.join(filter(None, [str(HERE.parent), os.environ.get("PYTHONPATH")]))
    env = environment()
    result: dict[str, Any] = {"benchmark": "gpu_smoke", "environment": env, "setup": vars(args) | {
        "overrides": overrides(args.micro), "world_size": 1}}  # fmt: skip
    if not env["cuda_available"]:
        result |= {"status": "not_run", "reason": "no GPU: torch.cuda.is_available() is false"}
        return write(result, not_run_lines(env, args), 0)
    record, failure = run_trial(args)
    if failure is not None:
        result |= {"status": "failed", "reason": failure, "record": record}
        lines = ["# GPU smoke test", "", f"**FAILED** on {env['device_name']}:", "", "```", failure, "```", ""]
        return write(result, lines, 1)
    passed = all(good for _, good in checks(record))
    result |= {"status": "passed" if passed else "checks_failed", "figures": figures(record),
               "checks": dict(checks(record)), "versions": record.get("versions")}  # fmt: skip
    return write(result, ran_lines(env, args, record), 0 if passed else 1)


def write(result: dict[str, Any], lines: list[str], code: int) -> int:
    atomic_write_json(OUT / "gpu_smoke.json", result)
    atomic_write_text(OUT / "gpu_smoke.md", "\n".join(lines))
    print(f"{result['status']}: → {OUT / 'gpu_smoke.md'}")
    return code


if __name__ == "__main__":
    sys.exit(main())
