"""`launcher plan --search` against what experts chose: every published run of the corpus
(benchmarks/data/published_scaling.csv) whose layout the launcher can state.

Per row, the published configuration (replay_mapping.map_row: layout, tp, pp, micro-batch, global
batch, recompute, hardware, network) is predicted by `launcher plan` on presets, and the search
runs at the same size with the same model, global batch and cluster. Acceptance: the searched
best predicts at least the published configuration's throughput, by the model's own measure, and
its memory fits. The estimate is of the trainer each source ran, as its configuration says
(replay_mapping.py TRAINERS, FUSED_RMSNORM, TORCHTITAN_SELECTIVE: llm-foundry's fused cross-entropy
and low-precision LayerNorm, torchtitan's per-op recompute and fused RMSNorm, Megatron's distributed
optimizer; 96 GB H100s where the hardware says so). Where a published configuration is still over
the memory limit by the estimate, it is no candidate, and the row says so with the ratio found.
Published FSDP runs that reduce-scatter every accumulation micro-step (Composer, torchtitan) are
mapped to parallel.fsdp_sync_each_microstep (replay_mapping.py). The sources the
layouts issue holds out (NVIDIA's DGX Cloud recipes, MegaScale, InternLM, Zero Bubble, Together's
and Trainy's reports) are not in the corpus and stay out.

    python -m benchmarks.search_corpus

Writes benchmarks/results/search_corpus.{json,md}; about three minutes (a unit test,
tests/unit/test_search_corpus.py, checks two rows of it).
"""

from __future__ import annotations

import csv
import time
from pathlib import Path

from benchmarks.replay_mapping import FUSED_RMSNORM, TORCHTITAN_SELECTIVE, TRAINERS, Unexpressible, map_row, series_key
from launcher.config.compose import compose_config
from launcher.config.errors import ConfigError
from launcher.io import atomic_write_json, atomic_write_text
from launcher.perf.memory import GIB
from launcher.perf.plan_table import from_presets_forecast
from launcher.perf.search import search

HERE = Path(__file__).resolve().parent
CORPUS = HERE / "data" / "published_scaling.csv"
RESULTS = HERE / "results"
PUBLISHED_KEYS = ("parallel", "batch", "model.act", "trainer", "cluster.device_memory_gb")
"""The mapped overrides a row's `published` field shows: its layout, batch, recompute and what its trainer keeps."""


OVER_LIMIT_WHY = {
    "llama3_meta_2024": "the paper states tp, pp, cp, dp and the batch, not its activation checkpointing (planned "
    "selective, Megatron's default) nor its memory-saving schedule: nothing stated lowers the estimate",
    "torchtitan_h100_2024": "the table states full activation checkpointing and its local batch (both mapped) on 96 GB "
    "H100s; nothing else it states (no chunked loss, no offload) lowers the estimate",
    "pytorch_fsdp_blog_2024": "the blog states HSDP, selective checkpointing and micro batch 2 (all mapped); nothing "
    "else it states lowers the estimate",
    "nemo_perf_2407": "the distributed optimizer is mapped (NeMo's config); the table states no activation "
    "checkpointing (planned selective), so nothing stated lowers the estimate further",
    "nemo_long_seq_2505": "the distributed optimizer is mapped (NeMo's recipes); the table states no activation "
    "checkpointing (planned selective), so nothing stated lowers the estimate further",
}
"""Why a published configuration the memory estimate puts over the limit stays there, per source: what its
source states is mapped (benchmarks/replay_mapping.py), and no setting is invented to make it fit."""


def judge(row: dict) -> dict:
    """One corpus row: the published configuration's prediction beside the searched best's."""
    out = {"source": row["source"], "model": row["model"], "layout": row["layout"], "gpus": int(row["gpus"])}
    try:
        mapped = map_row(row)
    except Unexpressible as exc:
        return out | {"verdict": "skipped", "why": str(exc)}
    cfg = compose_config(mapped.overrides)
    pub = from_presets_forecast(cfg, [mapped.gpus], assume_mfu=None, check_memory=False).table.iloc[0]
    if pub["status"] != "predicted":
        return out | {"verdict": "skipped", "why": f"plan: {pub['reason']}"}
    limit_gib = None
    try:
        found = search(cfg, [mapped.gpus], assume_mfu=None)
    except ConfigError as exc:
        return out | {"verdict": "no candidate", "why": str(exc), "published_tokens_per_s": pub["tokens_per_s"]}
    if found.limit is not None:
        limit_gib = found.limit.usable_bytes / GIB
    best = found.sizes[0].ranked[0]
    published_fits = limit_gib is None or pub["memory_gib"] <= limit_gib
    ratio = float(best.tokens_per_s / pub["tokens_per_s"])
    if published_fits:
        verdict = "met" if ratio >= 1 - 1e-9 else "NOT met"
    else:
        verdict = "published over the limit"
    return out | {
        "series": " / ".join(map(str, series_key(row)[:3])),
        "published": " ".join(
            o for o in mapped.overrides if o.startswith(("parallel", "batch", "model.act", "trainer"))
        ),
        "published_tokens_per_s": float(pub["tokens_per_s"]),
        "published_memory_gib": float(pub["memory_gib"]),
        "best": best.candidate.label,
        "best_tokens_per_s": best.tokens_per_s,
        "best_memory_gib": best.memory_bytes / GIB,
        "limit_gib": limit_gib,
        "ratio": ratio,
        "verdict": verdict,
    }


def main() -> int:
    start = time.monotonic()
    with open(CORPUS, newline="") as f:
        rows = [judge(r) for r in csv.DictReader(f)]
    wall = time.monotonic() - start
    judged = [r for r in rows if r["verdict"] in ("met", "NOT met", "published over the limit")]
    fits = [r for r in judged if r["verdict"] != "published over the limit"]
    over = [r for r in judged if r["verdict"] == "published over the limit"]
    failed = [r for r in fits if r["verdict"] == "NOT met"]
    best_fit = all(r["limit_gib"] is None or r["best_memory_gib"] <= r["limit_gib"] for r in judged)
    doc = {
        "rows": rows,
        "wall_s": round(wall, 1),
        "judged": len(judged),
        "published_fits": len(fits),
        "met": len(fits) - len(failed),
        "published_over_limit": len(over),
        "every_best_fits": best_fit,
    }
    atomic_write_json(RESULTS / "search_corpus.json", doc)
    worst = min(over, key=lambda r: r["ratio"]) if over else None
    lines = [
        "# The search against published configurations",
        "",
        f"`python -m benchmarks.search_corpus`, {time.strftime('%Y-%m-%d')}, {wall:.0f} s. {len(rows)} corpus rows, "
        f"{len(judged)} with a layout the launcher states and can plan at their size "
        f"({len(rows) - len(judged)} skipped, each with its reason in the JSON).",
        "",
        f"- Published configuration within the memory limit by the estimate: {len(fits)} rows; the searched best "
        f"predicts at least its throughput in **{len(fits) - len(failed)} of {len(fits)}** "
        f"({'met' if not failed else 'NOT met'}).",
        "- Published configuration over the limit by the estimate (no candidate, so the search may fall short): "
        + (
            f"{len(over)} rows; searched best ÷ published from {min(r['ratio'] for r in over):.3f} to "
            f"{max(r['ratio'] for r in over):.3f} (worst: {worst['model']} at {worst['gpus']} GPUs, published "
            f"estimated {worst['published_memory_gib']:.0f} GiB)."
            if worst
            else "none."
        ),
        f"- Searched best ÷ published, every judged row: {min(r['ratio'] for r in judged):.3f} to "
        f"{max(r['ratio'] for r in judged):.3f}.",
        f"- Every searched best fits the memory limit: {'yes' if best_fit else 'NO'}.",
        "- The memory estimate is of each source's trainer as its configuration says (benchmarks/replay_mapping.py): "
        + "; ".join(f"{src}: {' '.join(o)} ({why})" for src, (o, why) in TRAINERS.items())
        + "; torchtitan: `selective` is its per-op policy (model.activation_checkpointing=op: "
        + "; ".join(f"{src}: {why}" for src, why in TORCHTITAN_SELECTIVE.items())
        + "), trainer.norm_16bit where its config names fused_rmsnorm ("
        + "; ".join(f"{model}: {why}" for (_, model), why in FUSED_RMSNORM.items())
        + "); 96 GB H100s where the hardware name says 96GB.",
        "",
        "| source | model | GPUs | published layout | published tok/s | its GiB | searched best | best tok/s "
        "| best GiB | ratio | verdict |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
        *(
            f"| {r['source']} | {r['model']} | {r['gpus']} | {r['layout']} | {r['published_tokens_per_s']:,.0f} | "
            f"{r['published_memory_gib']:.1f} | {r['best']} | {r['best_tokens_per_s']:,.0f} | "
            f"{r['best_memory_gib']:.1f} | {r['ratio']:.3f} | {r['verdict']} |"
            for r in judged
        ),
        "",
        "Published configurations over the limit by the estimate, and why they stay there:",
        "",
        *(
            f"- {r['source']} {r['model']} at {r['gpus']} GPUs: {r['published_memory_gib']:.1f} GiB of "
            f"{r['limit_gib']:.1f} usable; {OVER_LIMIT_WHY.get(r['source'], 'no reason recorded')}."
            for r in over
        ),
    ]
    atomic_write_text(RESULTS / "search_corpus.md", "\n".join(lines) + "\n")
    print("\n".join(lines[:10]))
    return 0 if not failed and best_fit else 1


if __name__ == "__main__":
    raise SystemExit(main())
