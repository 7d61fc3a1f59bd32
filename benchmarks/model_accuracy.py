"""Performance-model accuracy: prediction error (MAPE) at held-out sizes and accumulations.

Runs one real sweep on the dev cluster (`launcher cluster up` first): DDP tiny_gpt over
1, 2, 3, 4 nodes × accumulation 1, 2, 4 (12 trials, one job each, serialised). Then, for
each hold-out split, fits the model (launcher.model.calibrate) on the training trials only and
predicts the held-out trials' tokens/s:
  sizes         fit nodes {1,2,4}        → predict nodes 3
  accumulation  fit accum {1,4}          → predict accum 2
  extrapolate   fit nodes {1,2,3}        → predict nodes 4
  both          fit {1,2,4} × {1,4}      → predict (3 nodes, accum 2)
Goal: MAPE ≤ 10%. Writes benchmarks/results/model_accuracy.{json,md}.

    .venv/bin/python benchmarks/model_accuracy.py [--sweep results/<existing sweep>] [--steps 25]
"""

from __future__ import annotations

import argparse
import os
import platform
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

from launcher.model.calibrate import fit_layouts, load_measured, shape_at  # noqa: E402
from launcher.io import atomic_write_json, atomic_write_text  # noqa: E402

SPLITS = {
    "sizes": (lambda n, a: n != 3, "fit nodes {1,2,4}, predict nodes 3"),
    "accumulation": (lambda n, a: a != 2, "fit accum {1,4}, predict accum 2"),
    "extrapolate": (lambda n, a: n != 4, "fit nodes {1,2,3}, predict nodes 4"),
    "both": (lambda n, a: n != 3 and a != 2, "fit nodes {1,2,4} × accum {1,4}, predict (3, 2)"),
}


def run_sweep(name: str, steps: int) -> Path:
    argv = [sys.executable, "-m", "launcher", "sweep", "cluster=devcluster", "sweep.nodes=[1,2,3,4]", "batch.accum=1,2,4",
            f"sweep.steps={steps}", "sweep.warmup_steps=5", f"sweep.name={name}", "sweep.results_dir=/tmp/launcher-bench",
            "--quiet"]  # fmt: skip
    subprocess.run(argv, check=True, cwd=HERE.parent)
    return Path("/tmp/launcher-bench") / name


def evaluate(sweep: Path) -> dict:
    measured = load_measured(sweep)
    out = {}
    for split, (train_if, label) in SPLITS.items():
        train = [m for m in measured if train_if(m.trial["nodes"], m.trial["accum"])]
        test = [m for m in measured if m not in train]
        model = fit_layouts(train, "nvlink", "eth10")["ddp"]
        cases = []
        for m in sorted(test, key=lambda m: (m.trial["nodes"], m.trial["accum"])):
            shape = shape_at(m)
            p = model.predict(shape)
            seq = m.config["model"]["seq_len"]
            pred = p.tokens_per_s(shape.global_batch, seq)
            low, high = p.tokens_per_s_interval(shape.global_batch, seq)
            meas = m.metrics["tokens_per_s"]
            cases.append({"nodes": m.trial["nodes"], "accum": m.trial["accum"], "measured_tokens_per_s": meas,
                          "predicted_tokens_per_s": pred, "low": low, "high": high,
                          "error_pct": 100 * abs(pred - meas) / meas, "inside_interval": low <= meas <= high})  # fmt: skip
        out[split] = {"label": label, "train_trials": len(train), "mape_pct": sum(c["error_pct"] for c in cases) / len(cases),
                      "cases": cases, "model": model.to_dict()}  # fmt: skip
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sweep", help="evaluate an existing sweep folder instead of running one")
    ap.add_argument("--steps", type=int, default=25)
    args = ap.parse_args()
    os.environ.setdefault("SLURM_CONF", "/var/tmp/launcher-devcluster/etc/slurm.conf")
    start = time.time()
    sweep = Path(args.sweep) if args.sweep else run_sweep(f"model-accuracy-{int(start)}", args.steps)
    results = evaluate(sweep)
    doc = {"sweep": str(sweep), "machine": platform.platform(), "cpus": os.cpu_count(), "wall_s": time.time() - start,
           "goal_mape_pct": 10.0, "splits": results}  # fmt: skip
    atomic_write_json(HERE / "results" / "model_accuracy.json", doc)
    lines = [
        "# Performance-model accuracy (held-out trials, real dev-cluster sweep)", "",
        f"Sweep `{sweep.name}`: DDP tiny_gpt, nodes 1–4 (one rank each) × accumulation 1/2/4, {args.steps} steps, "
        "first 5 excluded. The dev cluster's 4 nodes share this machine's "
        f"{os.cpu_count()} cores, so 3 and 4 ranks are oversubscribed: the model's contention term (Σ threads ÷ "
        "cores, recorded by every trial, raised to a fitted exponent γ) carries that, only approximately: lock-step "
        "ranks on shared cores slow down by more than their share, and not as a clean power law. For each split the model is fitted on the training trials "
        "only (`launcher.model.calibrate.fit_layouts`) and predicts the rest. Goal: MAPE ≤ 10%.", "",
        "| split | trained on | MAPE | worst | measured inside interval |", "|---|---|---|---|---|",
    ]  # fmt: skip
    lines[-2] = "| split | trained on | MAPE | worst | measured inside interval | fitted γ |"
    lines[-1] = "|---|---|---|---|---|---|"
    for split, r in results.items():
        worst = max(c["error_pct"] for c in r["cases"])
        inside = sum(c["inside_interval"] for c in r["cases"])
        lines.append(f"| {split} | {r['label']} ({r['train_trials']} trials) | {r['mape_pct']:.1f}% ({'met' if r['mape_pct'] <= 10 else 'NOT met'}) | {worst:.1f}% | "
                     f"{inside}/{len(r['cases'])} | {r['model']['contention_exponent']:.2f} |")  # fmt: skip
    lines += ["", "Per held-out trial:", "", "| split | nodes | accum | measured tok/s | predicted | error |", "|---|---|---|---|---|---|"]
    for split, r in results.items():
        for c in r["cases"]:
            lines.append(f"| {split} | {c['nodes']} | {c['accum']} | {c['measured_tokens_per_s']:,.0f} | "
                         f"{c['predicted_tokens_per_s']:,.0f} | {c['error_pct']:.1f}% |")  # fmt: skip
    lines += ["", f"Reproduce: `launcher cluster up && .venv/bin/python benchmarks/model_accuracy.py` ({doc['wall_s']:.0f} s).", ""]
    atomic_write_text(HERE / "results" / "model_accuracy.md", "\n".join(lines))
    print("\n".join(lines))


if __name__ == "__main__":
    main()
