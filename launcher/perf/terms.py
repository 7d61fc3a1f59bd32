"""The terms of a predicted step as shares of it, and the plan's footer when one term dominates:
which, where, and what would reduce it. Pure."""

from __future__ import annotations

import pandas as pd

from launcher.compute.flops import inactive_params, param_counts
from launcher.config.derived import ranks_per_node
from launcher.config.schema import LauncherConfig
from launcher.layouts import LAYOUTS, DataParallel, Degree, traits
from launcher.perf.step import Prediction

DOMINANT = {"comm_share": 0.50, "bubble_share": 0.30, "recompute_share": 0.25}
"""A term dominates a step above this share of it: exposed communication, the pipeline bubble,
activation recompute."""
NAMES = {"comm_share": "communication", "bubble_share": "the pipeline bubble", "recompute_share": "recompute"}
COMM_PARTS = ("dp_comm_share", "tp_comm_share", "pp_comm_share", "cp_comm_share", "ep_comm_share")


def term_shares(p: Prediction) -> dict[str, float]:
    """Each term's share of the predicted step (comm_share is the plan's own column)."""
    step = p.step_s or float("nan")
    return {
        "bubble_share": p.bubble_s / step,
        "recompute_share": p.recompute_s / step,
        "dp_comm_share": p.dp_comm_s / step,
        "tp_comm_share": p.tp_comm_s / step,
        "pp_comm_share": p.pp_comm_s / step,
        # Expert parallel's all-to-alls: a column only where a layout has them.
        **({"ep_comm_share": p.ep_comm_s / step} if p.ep_comm_s else {}),
        # Only where a ring runs, so that the tables of the other layouts keep their columns.
        **({"cp_comm_share": p.cp_comm_s / step} if p.cp_comm_s else {}),
    }


def _comm_remedy(row: pd.Series, layout: str, reshard: bool) -> str:
    traits_ = traits(layout) if layout in LAYOUTS else None
    part = max(COMM_PARTS, key=lambda c: row.get(c, 0.0) or 0.0)
    if part == "tp_comm_share":
        return "tensor-parallel collectives: a smaller parallel.tp, kept inside a node"
    if part == "ep_comm_share":
        return "expert-parallel all-to-alls: a smaller parallel.ep, its group kept inside a node"
    if part == "cp_comm_share":
        return "the context-parallel ring: a smaller parallel.cp, its ranks kept inside a node"
    if part == "pp_comm_share":
        return "pipeline sends: fewer stages (parallel.pp) or larger micro-batches"
    if traits_ and traits_.data_parallel == DataParallel.fsdp and traits_.splits("pp") and reshard:
        return (
            "data-parallel gathers repeated per micro-batch: no resharding inside a pipeline "
            "(parallel.reshard_after_forward=false)"
        )
    return (
        "data-parallel traffic: another layout with a smaller data-parallel group (fsdp_tp, fsdp_tp_pp), "
        "or more samples per rank (batch.micro, batch.accum)"
    )


REMEDY = {
    "bubble_share": "more micro-batches (parallel.microbatches with batch.micro), interleaved stages "
    "(parallel.schedule=interleaved_1f1b) or a smaller parallel.pp",
    "recompute_share": "model.activation_checkpointing=selective or none where the memory column leaves room",
}


def dominant_lines(table: pd.DataFrame, layout: str, reshard: bool) -> list[str]:
    """One footer line per term that dominates some predicted size: the sizes, its largest share,
    what would reduce it; `launcher plan --search` weighs every alternative."""
    lines = []
    rows = table[table["status"] == "predicted"] if "status" in table else table
    for col, bound in DOMINANT.items():
        if col not in rows:
            continue
        over = rows[rows[col] > bound]
        if over.empty:
            continue
        worst = over.loc[over[col].idxmax()]
        sizes = ", ".join(str(int(n)) for n in over["world_size"])
        remedy = _comm_remedy(worst, layout, reshard) if col == "comm_share" else REMEDY[col]
        lines.append(
            f"dominant: {NAMES[col]} > {bound:.0%} of the step at {sizes} GPUs (up to {worst[col]:.0%}); "
            f"to reduce it: {remedy}; `launcher plan --search` weighs every layout"
        )
    return lines


def moe_line(cfg: LauncherConfig, *, searched: bool = False) -> str | None:
    """The footer's line on a mixture-of-experts model's assumptions (None for a dense model);
    `searched`: for `plan --search`, whose candidates set parallel.ep themselves."""
    m, par = cfg.model, cfg.parallel
    if not m.n_experts:
        return None
    total = param_counts(m)[0]
    active = total - inactive_params(m)
    rpn = ranks_per_node(cfg.cluster)
    ep = par.ep if traits(par.layout).splits("ep") and par.ep else 1
    link = (
        f"in-node link where ep ≤ {rpn}, else the inter-node one"
        if searched
        else ("in-node link" if ep <= rpn else "inter-node link")
    )
    who = "each candidate's ep" if searched else f"ep={ep}"
    copies = cfg.trainer.ep_dispatch_copies or m.experts_per_token  # a per-rank dispatcher's (DeepEP's) copies
    a2a = (
        f"{who}: each MoE block's dispatch and combine all-to-alls (tokens × {copies} × d_model, "
        f"(ep−1)/ep of it leaving a rank), forward and backward, on the {link}, not overlapped with compute; "
        "experts' memory ÷ ep"
        if ep > 1 or searched
        else "no expert parallelism: every rank holds every expert"
    )
    return (
        f"moe: {m.n_experts} experts, top-{m.experts_per_token}, {m.shared_experts} shared; FLOPs per active "
        f"parameter ({active / 1e9:.1f}B of {total / 1e9:.1f}B); routing capacity-free (no token dropped: every "
        f"token's {m.experts_per_token} experts compute it; real balance not modelled); {a2a}; activations as a "
        "dense block's as wide as a token's experts together (no router or dispatch buffers); attention as "
        "multi-head/grouped-query attention (Multi-head Latent Attention, DeepSeek-V3's, not modelled); published "
        "MoE runs of Qwen3-30B-A3B (128 small experts) measured 1.05-1.1× this model's figure on 8-16 H100s and 0.7× "
        "on 8-128 B200s, a device with no fitted curve of its own (benchmarks/results/published_replay.md)"
    )


FP8_H200 = ((4096, 1.126, 1.398), (2048, 1.056, 1.665), (768, 0.896, 1.357))
"""benchmarks/results/fp8_speedup.md (one H200, torchao 0.17 tensorwise, compiled): per d_model, fp8 ÷ bf16
tokens/s as measured, and as at equal MFU (the blended peak ÷ the bf16 peak). A test ties them to its json."""


def fp8_line(mfu_ratio: tuple[float, str] | None) -> str | None:
    """The footer's line on fp8's speed: the fp8 ÷ bf16 MFU the plan assumes (`mfu_ratio`: the ratio and
    why, plan_table.fp8_mfu_ratio; None for a recipe not in fp8 or planned from a sweep), what that gives
    at the widths one GPU measured, and what it measured there."""
    if mfu_ratio is None:
        return None
    ratio, why = mfu_ratio
    gives = ", ".join(f"{ratio * equal:.2f}x" for _, _, equal in FP8_H200)
    measured = ", ".join(f"{got:.2f}x at d_model {d}" for d, got, _ in FP8_H200)
    line = (
        f"fp8: MFU {ratio:.2f} of bf16's ({why}), which gives fp8 ÷ bf16 tokens/s {gives} where one H200 "
        f"measured {measured} (benchmarks/results/fp8_speedup.md)"
    )
    return line + ("" if ratio < 1 else ": read fp8 rows as an upper bound")


def layout_lines(cfg: LauncherConfig) -> list[str]:
    """The footer's assumptions of the hsdp and context-parallel terms (perf/overlap.py, ring.py)."""
    row, par, lines = traits(cfg.parallel.layout), cfg.parallel, []
    if row.replicate != Degree.none:
        shard = f"{par.shard}" if par.shard else f"the {ranks_per_node(cfg.cluster)} GPUs of a node (parallel.shard=0)"
        lines.append(
            f"hsdp: FSDP inside shard groups of {shard}, their all-gathers and reduce-scatters on the links the "
            "group spans; each gradient shard then all-reduced across the dp ÷ shard replicas (the inter-node "
            "link once they sit on other nodes), hidden under backward as the reduce-scatters are; parameters, "
            "gradients and optimizer state ÷ shard"
        )
    if row.splits("cp"):
        lines.append(
            f"cp: each sequence split over parallel.cp={par.cp} GPUs: activations ÷ {par.cp}; torch's ring "
            "attention sends this rank's keys and values per layer (cp − 1 exchanges forward, 2·cp − 1 with their "
            "gradients backward), each overlapped with one ring step's attention and exposed where it outlasts it; "
            "no collective of its own for gradients: FSDP shards and reduces over dp × cp"
        )
    return lines
