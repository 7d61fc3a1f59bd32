"""fp8 against bf16 on one GPU, per model width: is the plan's fp8 speed-up what a GPU measures?

The plan (launcher/compute/fp8.py) runs precision=fp8 at the same MFU as bf16, quoted against the
blended peak 1 / (s / P_fp8 + (1 − s) / P_bf16), s the share of the step's FLOPs in the blocks'
float8 linear layers: it assumes fp8 ÷ bf16 tokens/s = blended peak ÷ bf16 peak. Here both run for
real (1 rank, DDP, `train.compile=true` for both, as torchao's float8 casts want compile), through the
real payload as gpu_smoke runs a trial, for three widths: llama3_8b's layer (d 4096, 4 of its 32
layers, seq 4096), gpt_1_3b (d 2048) and gpt_125m (d 768). The truth is the GPU's measured tokens/s;
the assumed ratio comes from the records' peaks (the payload's own peak choice).

Goal: the plan's speed-up within 25% of the measured one, per shape (written "NOT met" where not), in
two columns: at equal MFU (what a plan assumes for a device without an fp8 fit) and at the fp8 ÷ bf16 MFU
fitted on published H100 runs, which an H200 plan uses too (launcher/perf/preset_fit.json, SAME_CHIP).
Results are rewritten after every trial, so a run cut short keeps what it measured; `--render` rewrites
the .md from the .json. Without a GPU it writes "NOT run: no GPU".

    .venv/bin/python -m benchmarks.fp8_speedup [--steps 20] [--warmup 8]
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path
from typing import Any

from benchmarks.gpu_smoke import environment, run_trial
from launcher.io import atomic_write_json, atomic_write_text, read_json
from launcher.perf import preset_fit

HERE = Path(__file__).resolve().parent
OUT = HERE / "results"
REPRODUCE = (
    "`.venv/bin/python -m benchmarks.fp8_speedup` (one CUDA GPU of compute capability ≥ 8.9, `pip install '.[fp8]'`)"
)
GOAL = 0.25
COMMON = ["parallel=ddp", "cluster.device=cuda", "batch.accum=1", "optim=adamw", "seed=0", "train.compile=true"]
SHAPES = {
    "llama3_8b_4_layers": ["model=llama3_8b", "model.n_layers=4", "model.seq_len=4096", "batch.micro=2"],
    "gpt_1_3b": ["model=gpt_1_3b", "batch.micro=4"],
    "gpt_125m": ["model=gpt_125m", "batch.micro=8"],
}


def verdict(plan_over_measured: float) -> str:
    return "met" if abs(plan_over_measured - 1) <= GOAL else "NOT met"


def h100_ratio() -> float:
    """The plan's fp8 ÷ bf16 MFU on an H100 or H200: both fitted on published H100 runs
    (launcher/perf/preset_fit.json), not on anything measured here."""
    fit = preset_fit.load()
    return fit.mfu["H100/fp8"] / fit.mfu["H100/bf16"]


def lines(
    env: dict[str, Any], args: argparse.Namespace, rows: list[dict[str, Any]], notes: list[str] = ()
) -> list[str]:
    """The .md: the table, then `notes` (the json's, written after a run: what the figures mean)."""
    ratio = h100_ratio()
    head = [
        "# fp8 speed-up on one GPU: measured against the plan's assumption",
        "",
        f"Measured {env['measured_at']} on **{env['device_name']}** (torch {env['torch']}, CUDA {env['cuda']}): "
        f"1 rank, DDP, train.compile=true, {args.steps} steps, the first {args.warmup} excluded; one run a trial.",
        "",
        *[f"- {name}: `{' '.join(o)}` + `precision=bf16` / `precision=fp8`" for name, o in SHAPES.items()],
        "",
        "| shape | bf16 tokens/s | fp8 tokens/s | measured fp8 ÷ bf16 | at equal MFU (no fp8 fit) | ÷ measured "
        f"| goal ±25% | at the H100/H200 fitted MFU ratio {ratio:.3f} | ÷ measured | goal ±25% "
        "| memory estimate ÷ CUDA peak, bf16 / fp8 |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    body = []
    for r in rows:
        if r.get("failed"):
            body.append(f"| {r['shape']} | failed: {r['failed']} | | | | | NOT run | |")
            continue
        fitted = r["assumed"] * ratio
        body.append(
            f"| {r['shape']} | {r['bf16']:,.0f} | {r['fp8']:,.0f} | {r['measured']:.3f} | {r['assumed']:.3f} | "
            f"{r['plan_over_measured']:.2f} | {verdict(r['plan_over_measured'])} | {fitted:.3f} | "
            f"{fitted / r['measured']:.2f} | {verdict(fitted / r['measured'])} | "
            f"{r['memory_bf16']:.2f} / {r['memory_fp8']:.2f} |"
        )
    return [*head, *body, "", *[line for note in notes for line in (note, "")], f"Reproduce: {REPRODUCE}", ""]


def measure(name: str, overrides: list[str], args: argparse.Namespace) -> dict[str, Any]:
    got, estimated = {}, {}
    for precision in ("bf16", "fp8"):
        record, failure, estimated[precision] = run_trial(
            [*overrides, *COMMON, f"precision={precision}"], args.steps, args.warmup
        )
        print(f"{name} {precision}: {'completed' if failure is None else 'FAILED ' + failure[-500:]}", flush=True)
        if failure is not None:
            return {"shape": name, "failed": f"{precision}: {failure.splitlines()[0][:200]}"}
        got[precision] = record["metrics"]
    b, f = got["bf16"], got["fp8"]
    measured = f["tokens_per_s"] / b["tokens_per_s"]
    assumed = f["peak_flops_per_device"] / b["peak_flops_per_device"]
    return {
        "shape": name,
        "bf16": b["tokens_per_s"],
        "fp8": f["tokens_per_s"],
        "bf16_mfu": b["mfu"],
        "fp8_mfu": f["mfu"],
        "measured": measured,
        "assumed": assumed,
        "plan_over_measured": assumed / measured,
        # launcher/perf/memory.py's params + grads + optimizer + activations ÷ CUDA's peak allocation
        "memory_bf16": estimated["bf16"] / b["cuda_peak_allocated_bytes"],
        "memory_fp8": estimated["fp8"] / f["cuda_peak_allocated_bytes"],
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--warmup", type=int, default=8)
    ap.add_argument("--render", action="store_true", help="rewrite the .md from the stored .json (no GPU needed)")
    args = ap.parse_args()
    if args.render:
        return render()
    os.environ["PYTHONPATH"] = os.pathsep.join(filter(None, [str(HERE.parent), os.environ.get("PYTHONPATH")]))
    env = environment()
    result: dict[str, Any] = {"benchmark": "fp8_speedup", "environment": env, "setup": vars(args) | {"shapes": SHAPES}}
    if not env["cuda_available"]:
        result |= {"status": "not_run", "reason": "no GPU: torch.cuda.is_available() is false"}
        return write(result, ["# fp8 speed-up on one GPU", "", "**NOT run: no GPU.**", "", f"Reproduce: {REPRODUCE}"])
    rows: list[dict[str, Any]] = []
    for name, overrides in SHAPES.items():
        rows.append(measure(name, overrides, args))
        result |= {"status": "partial" if len(rows) < len(SHAPES) else "done", "rows": rows}
        write(result, lines(env, args, rows))
    return 0


def render() -> int:
    """The .md again from the .json's measured rows and notes (the plan columns follow preset_fit.json)."""
    result = read_json(OUT / "fp8_speedup.json")
    args = argparse.Namespace(**result["setup"])
    return write(result, lines(result["environment"], args, result["rows"], result.get("notes", [])))


def write(result: dict[str, Any], text: list[str]) -> int:
    atomic_write_json(OUT / "fp8_speedup.json", result)
    atomic_write_text(OUT / "fp8_speedup.md", "\n".join(text))
    print(f"{result['status']}: → {OUT / 'fp8_speedup.md'}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
