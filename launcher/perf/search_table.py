"""The tables of `launcher plan --search`: per size its best candidate (judged by sweep.policy
like any plan), the runners-up with one line on why each loses, and every candidate for
`--output`. Pure."""

from __future__ import annotations

import math
import re

import pandas as pd

from launcher.config.derived import ranks_per_node
from launcher.config.schema import LauncherConfig
from launcher.perf.memory import GIB
from launcher.perf.plan_table import OOM, Forecast, _finish
from launcher.perf.search import TOP, Scored, Search
from launcher.perf.terms import term_shares

TERMS = (
    ("recompute_s", "more recompute"),
    ("bubble_s", "more pipeline bubble"),
    ("dp_comm_s", "more exposed data-parallel communication"),
    ("tp_comm_s", "more exposed tensor-parallel communication"),
    ("pp_comm_s", "more exposed pipeline sends"),
    ("cp_comm_s", "more exposed context-parallel ring time"),
    ("ep_comm_s", "more expert-parallel all-to-all time"),
    ("overhead_s", "more fixed overhead"),
)
"""A predicted step's terms, and how a candidate that loses on one says so."""


TIES = "ties the best within rounding"
"""why_loses of a candidate no term of whose step per token exceeds the best's."""
KEY = (
    (r"\bmb\d+×\d+\b", "mbA×B: B micro-batches of A samples per step (accumulated, or a pipeline's micro-batches)"),
    (r"\btp\d+\b", "tpN: tensor-parallel degree"),
    (r"\bpp\d+\b", "ppN: pipeline stages"),
    (r"\bcp\d+\b", "cpN: context-parallel degree (each sequence split over N GPUs)"),
    (r"\bep\d+\b", "epN: expert-parallel degree"),
    (r"\bv\d+\b", "vN: interleaved virtual stages per GPU"),
    (r"\bno-ckpt\b", "no-ckpt: no activation checkpointing"),
    (r"\bsel\b", "sel: selective recompute (each block's attention core)"),
    (r"(?<![\w-])op(?![\w-])", "op: torchtitan's per-op checkpointing"),
    (r"\bfull\b", "full: full recompute (each block's forward again in backward)"),
    (r"\breshard\b", "reshard: FSDP frees gathered parameters after forward and gathers them again in backward"),
    (r"\bkeep\b", "keep: FSDP keeps them from forward to backward (more memory, one gather fewer)"),
    (r"\bsync-each\b", "sync-each: gradients reduce-scattered at every micro-step, not only the last (less memory)"),
)
"""The short words of a candidate's label (candidates.Candidate.label), each explained once under a
search's table where some shown label has it."""


def why_loses(best: Scored, other: Scored, seq: int) -> str:
    """The term of `other`'s step (per token, so global batches may differ) that exceeds the
    best's the most, as a share of the best's time per token."""
    b, o = best.prediction, other.prediction
    assert b is not None and o is not None  # only predicted candidates are ranked
    per_b = 1.0 / (best.candidate.global_batch * seq)
    per_o = 1.0 / (other.candidate.global_batch * seq)
    base = b.step_s * per_b
    # Compute apart from recompute is the same work per token at any split: what differs is the rest.
    deltas = {k: getattr(o, k) * per_o - getattr(b, k) * per_b for k, _ in TERMS}
    deltas["compute"] = (o.compute_s - o.recompute_s) * per_o - (b.compute_s - b.recompute_s) * per_b
    key = max(deltas, key=deltas.get)
    if deltas[key] <= 0:
        return TIES
    what = dict(TERMS).get(key, "more compute per token")
    return f"{what} (+{deltas[key] / base:.1%} of the best's step)"


def _figures(s: Scored, n: int, seq: int) -> dict:
    p = s.prediction
    out = {"world_size": n, "candidate": s.candidate.label, "memory_gib": s.memory_bytes / GIB}
    if p is None:
        return out | {"status": OOM, "reason": "predicted: over the memory limit"}
    return out | {
        "status": "completed",
        "dp": s.candidate.dp,
        "global_batch": s.candidate.global_batch,
        "tokens_per_s": s.tokens_per_s,
        "tokens_per_s_per_device": s.tokens_per_s / n,
        "step_time_median_s": p.step_s,
        "comm_share": p.comm_s / p.step_s,
        **term_shares(p),
        "reason": None,
    }


def best_forecast(cfg: LauncherConfig, found: Search) -> Forecast:
    """Per size its best candidate as a plan row (impossible where nothing runs at that size),
    judged by the config's policy like any plan."""
    rpn, seq, rows = ranks_per_node(cfg.cluster), found.work.tokens_per_sample, []
    for size in found.sizes:
        n = size.world_size
        if not size.ranked:
            least = min(size.dropped, key=lambda s: s.memory_bytes, default=None)
            why = (
                f"predicted oom: every candidate needs more, the least {least.memory_bytes / GIB:.1f} GiB per rank "
                f"({least.candidate.label})"
                if least
                else "no layout splits this size: " + ("; ".join(dict.fromkeys(size.refused)) or "no degrees divide it")
            )
            status = "oom" if least else "impossible"
            need = {"memory_gib": least.memory_bytes / GIB} if least else {}  # the least any candidate needs
            rows.append({"world_size": n, "status": status, "reason": why, **need})
            continue
        best = size.ranked[0]
        row = _figures(best, n, seq) | {"nodes": math.ceil(n / rpn)}
        k = math.exp(found.interval_log)
        row |= {"model_lo": best.tokens_per_s / k, "model_hi": best.tokens_per_s * k}
        p = best.prediction
        assert p is not None
        row["hardware_ratio"] = p.compute_s / (p.compute_s - p.recompute_s)  # this candidate's recompute
        rows.append(row)
    fc = _finish(rows, cfg, "", found.work)
    df = fc.table
    if "hardware_ratio" in df:
        df["hfu"] = df["mfu"] * df.pop("hardware_ratio")
    return Forecast(table=df, recommendation=fc.recommendation, source=fc.source)


def runner_lines(found: Search) -> list[str]:
    """Per size, the runners-up: tokens/s, memory, communication share and why each loses."""
    seq, lines = found.work.tokens_per_sample, []
    for size in found.sizes:
        if not size.ranked:
            continue
        best = size.ranked[0]
        for i, s in enumerate(size.ranked[1:TOP], start=2):
            p = s.prediction
            assert p is not None
            lines.append(
                f"  {size.world_size} GPUs #{i}: {s.candidate.label}: {s.tokens_per_s:,.0f} tokens/s "
                f"({s.tokens_per_s / best.tokens_per_s - 1:+.0%}), {s.memory_bytes / GIB:.1f} GiB, "
                f"comm {p.comm_s / p.step_s:.0%}; {_loses(why_loses(best, s, seq))}"
            )
    return lines


def _loses(why: str) -> str:
    return why if why == TIES else f"loses by {why}"


def key_line(found: Search) -> str | None:
    """One line explaining the label words the table and its runners-up show, and a tie, where they
    appear; None where nothing was ranked."""
    seq, labels, tied = found.work.tokens_per_sample, [], False
    for size in found.sizes:
        labels += [s.candidate.label for s in size.ranked[:TOP]]
        tied |= any(why_loses(size.ranked[0], s, seq) == TIES for s in size.ranked[1:TOP])
    text = " ".join(labels)
    said = [what for pattern, what in KEY if re.search(pattern, text)]
    if tied:
        said.append(f"{TIES}: no term of its step per token exceeds the best's; the larger micro-batch ranks first")
    return f"key: {'; '.join(said)}" if said else None


def every_candidate(found: Search) -> pd.DataFrame:
    """Every candidate of every size (fitting and dropped), for `--output`."""
    seq, rows = found.work.tokens_per_sample, []
    for size in found.sizes:
        for rank, s in enumerate([*size.ranked, *size.dropped], start=1):
            c = s.candidate
            row = _figures(s, size.world_size, seq)
            row["status"] = row["status"].replace("completed", "predicted")
            row |= {
                "layout": c.layout,
                "dp": c.dp,
                "tp": c.tp,
                "pp": c.pp,
                "virtual_stages": c.virtual_stages,
                "micro_batch": c.micro_batch,
                "microbatches": c.microbatches,
                "accum": c.accum,
                "activation_checkpointing": c.checkpointing,
                "reshard_after_forward": c.reshard_after_forward,
                "fsdp_sync_each_microstep": c.sync_each_microstep,
                "rank": rank if s.fits else None,
                "overrides": " ".join(c.overrides()),
            }
            rows.append(row)
    return pd.DataFrame(rows)
