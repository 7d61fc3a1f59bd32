"""Predicted MFU against width, judged on one H200's measured MFU (issue 32 item 1).

Truth is measured, never the model: benchmarks/results/fp8_speedup.json (one H200, one rank, DDP,
train.compile=true: gpt_125m d 768, gpt_1_3b d 2048, llama3_8b's shape with 4 layers d 4096; bf16 and
fp8, MFU against each precision's own peak, fp8's the fp8/bf16 blend) and benchmarks/results/gpu_smoke.json
(the same gpt_125m eager, bf16: the 0.28 the issue quotes). Prediction: `launcher plan`'s presets compute
term (launcher/perf/compute_term.py: the recipe's ops under the matmul curves in the fit file), which
for an H200 are the H100's (preset_fit.SAME_CHIP), fitted on published H100 runs: nothing measured on
the H200 is fitted. Goal: every predicted MFU within 10% (relative) of the measured.

    .venv/bin/python -m benchmarks.mfu_width [--fit launcher/perf/preset_fit.json] [--out benchmarks/results]
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from launcher.config.compose import compose_config
from launcher.perf import preset_fit
from launcher.perf.compute_term import shaped_mfu
from launcher.perf.plan_table import work_of

HERE = Path(__file__).resolve().parent
GOAL = 0.10
"""Predicted MFU within 10% of the measured, relative."""
DEVICE = ["cluster.device=cuda", "cluster.device_name=NVIDIA H200", "parallel=ddp", "batch.accum=1", "optim=adamw"]
SHAPES = {
    "gpt_125m": (768, ["model=gpt_125m", "batch.micro=8"]),
    "gpt_1_3b": (2048, ["model=gpt_1_3b", "batch.micro=4"]),
    "llama3_8b_4_layers": (4096, ["model=llama3_8b", "model.n_layers=4", "model.seq_len=4096", "batch.micro=2"]),
}
"""fp8_speedup.SHAPES, and the width (d_model) of each."""


def measured(results: Path) -> list[tuple[str, str, str, float]]:
    """(shape, precision, run, measured MFU) from the recorded H200 runs."""
    out = []
    for row in json.loads((results / "fp8_speedup.json").read_text())["rows"]:
        out += [(row["shape"], "bf16", "compiled", row["bf16_mfu"]), (row["shape"], "fp8", "compiled", row["fp8_mfu"])]
    smoke = json.loads((results / "gpu_smoke.json").read_text())["figures"]["main"]
    return out + [("gpt_125m", smoke["precision"], "eager (gpu_smoke)", smoke["mfu"])]


def predicted(shape: str, precision: str, fit: preset_fit.PresetFit) -> tuple[float, str]:
    """Model-FLOPs MFU `launcher plan` predicts on one H200 for the shape, and where its curve came from."""
    cfg = compose_config([*SHAPES[shape][1], *DEVICE, f"precision={precision}"], None)
    work = work_of(cfg)
    found = shaped_mfu(cfg, executed_flops=work.executed_flops, peak_flops=work.peak.flops, dtype=work.dtype, fit=fit)
    if found is None:
        raise SystemExit(
            f"mfu_width: the fit file has no curve for H200 {precision}; rerun benchmarks.published_replay"
        )
    executed_mfu, why = found
    return executed_mfu * work.model_flops / work.executed_flops, why


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--fit", type=Path, default=preset_fit.PACKAGED, help="the fitted curves (preset_fit.json)")
    ap.add_argument("--out", type=Path, default=HERE / "results", help="folder for mfu_width.md")
    args = ap.parse_args(argv)
    fit = preset_fit.load(args.fit)
    rows, met, why = [], 0, ""
    for shape, precision, run, truth in measured(HERE / "results"):
        mfu, why = predicted(shape, precision, fit)
        ok = abs(mfu / truth - 1) <= GOAL
        met += ok
        rows.append(
            f"| {shape} | {SHAPES[shape][0]} | {precision} | {run} | {truth:.3f} | {mfu:.3f} | {mfu / truth - 1:+.1%} "
            f"| {'met' if ok else '**NOT met**'} |"
        )
    gains = {s: predicted(s, "fp8", fit)[0] / predicted(s, "bf16", fit)[0] for s in SHAPES}
    truth = {(s, p): m for s, p, run, m in measured(HERE / "results") if run == "compiled"}
    lines = [
        "# Predicted MFU against width, on one H200's measured MFU",
        "",
        f"Prediction: `launcher plan`'s presets compute term ({why}), curves from {fit.made_by}. Truth: "
        "benchmarks/results/fp8_speedup.json and gpu_smoke.json (one H200, one rank); nothing measured on the H200 is "
        "fitted (an H200 plans with the H100's curves, preset_fit.SAME_CHIP).",
        "",
        "| shape | d_model | precision | run | measured MFU | predicted MFU | error | goal ±10% |",
        "|---|---|---|---|---|---|---|---|",
        *rows,
        "",
        f"Goal, every width within 10% (bf16 and fp8): {met}/{len(rows)} — "
        + ("met." if met == len(rows) else "**NOT met**."),
        "",
        "fp8 MFU ÷ bf16 MFU by width (each against its own peak), predicted (measured): "
        + ", ".join(f"d {SHAPES[s][0]} {g:.3f} ({truth[s, 'fp8'] / truth[s, 'bf16']:.3f})" for s, g in gains.items())
        + ". One model of the kernels serves the compiled and the eager run alike: the eager gpt_125m row "
        "ran 14% below the compiled one at the same shape.",
        "",
        "Where fp8 misses: the one H100/fp8 curve is fitted on 36 published rows of two fp8 stacks, NeMo's Transformer "
        "Engine (delayed scaling, fused casts; 18 rows, which the curve under-predicts) and torchao's tensorwise "
        "dynamic scaling in torchtitan (18 rows on 500 W H100s, over-predicted); the launcher's fp8, and this H200's, "
        "is torchao's. The corpus does not say the stack in a column (NeMo's notes do), so both are one key here.",
        "",
        "Reproduce: `.venv/bin/python -m benchmarks.mfu_width` (no GPU: the measured figures are recorded).",
    ]
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "mfu_width.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    return 0 if met == len(rows) else 1


if __name__ == "__main__":
    sys.exit(main())
