"""The memory estimate against the peaks published runs measured: both sides, and the margin they give.

Each row of benchmarks/data/published_memory.csv is a configuration a source ran and whose peak GPU
memory it printed (torchtitan's `Memory(GiB)` tables, NousResearch's DeepEP table: the caching
allocator's peak reservation, `reserved_bytes.all.peak`, the largest over the GPUs), or that it
reports ran out of memory. Its configuration is the published-scaling corpus's row of the same
source, model, GPU count, sequence length and technique, mapped as the replay maps it
(benchmarks/replay_mapping.py), plus the row's own `overrides` (another local batch). Estimated: the
neediest rank's tensors (launcher/perf/memory.py, its params, grads, optimizer and activations; the
runtime term, the CUDA context and NCCL's own buffers, is outside the allocator's reservation and
left out of the comparison). Scored: estimate ÷ measured per row, under- and over-estimates both;
per term where the source gives one (the Nous table's strong-scaling rows differ only in the data-
parallel degree: their fall in measured memory is the fall of the sharded params, grads and optimizer
state alone).

The margin (launcher/perf/memory.py MEMORY_MARGIN) is `derived_margin`: the memory the fullest
published run left free, 1 − max(measured ÷ device) over the runs that ran, rounded down to a whole
percent (the device's size as the source prints it, `device_gib`, else as the replay maps the hardware).
It is no bound on the estimate's error: a larger margin would call that run an oom with an exact
estimate, and the estimate's own errors (both sides, row by row in the result) are not covered by it.

    python -m benchmarks.memory_published

Writes benchmarks/results/memory_published.{json,md}. Seconds; nothing runs.
"""

from __future__ import annotations

import csv
import math
import sys
from pathlib import Path

from benchmarks.replay_mapping import map_row, technique
from launcher.config.compose import compose_config
from launcher.io import atomic_write_json, atomic_write_text
from launcher.perf.memory import GIB, MEMORY_MARGIN, estimate
from launcher.perf.memory_limit import limit_of
from launcher.trials.spec import make_trial

HERE = Path(__file__).resolve().parent
MEMORY = HERE / "data" / "published_memory.csv"
SCALING = HERE / "data" / "published_scaling.csv"
RESULTS = HERE / "results"
TERMS = ("params", "grads", "optimizer", "activations")
KEYS = ("source", "model", "gpus", "seq_len")


def read(path: Path) -> list[dict]:
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


def scaling_row(row: dict, corpus: list[dict]) -> dict:
    """The published-scaling row of the same run (source, model, GPUs, sequence length, technique)."""
    found = [r for r in corpus if all(r[k] == row[k] for k in KEYS) and technique(r) == row["technique"]]
    if len(found) != 1:
        what = ", ".join(f"{k} {row[k]}" for k in (*KEYS, "technique"))
        raise ValueError(f"published_memory.csv row ({what}) matches {len(found)} rows of {SCALING.name}, not 1")
    return found[0]


def scored(row: dict, corpus: list[dict]) -> dict:
    """One row's estimate by term (GiB), what was measured, their ratio and whether the estimate fits."""
    mapped = map_row(scaling_row(row, corpus))
    cfg = compose_config([*mapped.overrides, *row["overrides"].split()], None)
    need = estimate(cfg, make_trial(cfg, index=0, world_size=mapped.gpus, steps=1, warmup_steps=0), "cuda")
    terms = {t: getattr(need, t) / GIB for t in TERMS}
    tensors = sum(terms.values())
    measured = float(row["measured_gib"]) if row["measured_gib"] else math.nan
    device = float(row["device_gib"]) if row["device_gib"] else limit_of(cfg).device_bytes / GIB
    return {
        "source": row["source"],
        "what": f"{row['model']} {row['gpus']} GPUs seq {row['seq_len']} {row['technique']} {row['overrides']}".strip(),
        "outcome": row["outcome"],
        "terms_gib": terms,
        "estimate_gib": tensors,
        "total_gib": need.total / GIB,
        "measured_gib": measured,
        "ratio": tensors / measured if row["outcome"] == "ran" else math.nan,
        "device_gib": device,
        "usable_gib": limit_of(cfg).usable_bytes / GIB,
    }


def derived_margin(rows: list[dict]) -> float:
    """1 − the largest measured ÷ device over the rows that ran, rounded down to a whole percent."""
    fullest = max(r["measured_gib"] / r["device_gib"] for r in rows if r["outcome"] == "ran")
    return math.floor(round((1 - fullest) * 100, 6)) / 100


def strong_scaling_state(rows: list[dict]) -> dict:
    """Per term: the Nous strong-scaling rows (one recipe, 8 → 128 GPUs) change only the data-parallel
    degree, so the fall in their measured peak is the fall of the sharded params, grads and optimizer state."""
    series = sorted(
        (r for r in rows if r["source"] == "nous_deepep_2511" and "batch." not in r["what"] and r["outcome"] == "ran"),
        key=lambda r: int(r["what"].split()[1]),
    )
    first, last = series[0], series[-1]
    state = sum(first["terms_gib"][t] - last["terms_gib"][t] for t in ("params", "grads", "optimizer"))
    return {
        "from": first["what"],
        "to": last["what"],
        "measured_fall_gib": first["measured_gib"] - last["measured_gib"],
        "estimated_state_fall_gib": state,
        "estimated_activation_fall_gib": first["terms_gib"]["activations"] - last["terms_gib"]["activations"],
    }


def summary(rows: list[dict], margin: float) -> dict:
    """Both sides of the estimate over the runs that ran, and what it says of the runs that ran out."""
    ran = [r for r in rows if r["outcome"] == "ran"]
    ratios = sorted(r["ratio"] for r in ran)
    return {
        "ran": len(ran),
        "under": sum(x < 1 for x in ratios),
        "over": sum(x >= 1 for x in ratios),
        "min_ratio": ratios[0],
        "median_ratio": ratios[len(ratios) // 2] if len(ratios) % 2 else sum(ratios[len(ratios) // 2 - 1 :][:2]) / 2,
        "max_ratio": ratios[-1],
        "covered_by_margin": sum(x >= 1 - margin for x in ratios),
        "ran_but_oom": [r["what"] for r in ran if r["total_gib"] > r["usable_gib"]],
        "oom_rows": len(rows) - len(ran),
        "oom_caught": [r["what"] for r in rows if r["outcome"] == "oom" and r["total_gib"] > r["usable_gib"]],
    }


def _row_line(r: dict) -> str:
    t = r["terms_gib"]
    terms = " / ".join(f"{t[k]:.1f}" for k in TERMS)
    measured = f"{r['measured_gib']:.1f}" if r["outcome"] == "ran" else "oom"
    ratio = f"{r['ratio']:.2f}" if r["outcome"] == "ran" else "—"
    fits = "fits" if r["total_gib"] <= r["usable_gib"] else "oom (predicted)"
    return (
        f"| {r['source']} | {r['what']} | {measured} | {r['device_gib']:.1f} | {terms} | {r['estimate_gib']:.1f} | "
        f"{ratio} | {fits} ({r['total_gib']:.1f} of {r['usable_gib']:.1f}) |"
    )


def write(out: Path, rows: list[dict], *, margin: float, state: dict) -> None:
    s = summary(rows, margin)
    atomic_write_json(out / "memory_published.json", {"rows": rows, "summary": s, "margin": margin, "state": state})
    md = [
        "# The memory estimate against published peaks (`python -m benchmarks.memory_published`)",
        "",
        "Measured: the source's peak (benchmarks/data/published_memory.csv; torchtitan's and NousResearch's "
        "`reserved_bytes.all.peak`, the largest over the GPUs). Estimated: the neediest rank's tensors by "
        "launcher/perf/memory.py for the configuration the replay maps (runtime, outside the allocator, left out; "
        "`fits` compares the total with it against the device less MEMORY_MARGIN, as `launcher plan` does).",
        "",
        "| source | configuration | measured GiB | device GiB | params / grads / optimizer / activations GiB | "
        "estimate GiB | estimate ÷ measured | by the estimate |",
        "|---|---|---|---|---|---|---|---|",
        *(_row_line(r) for r in rows),
        "",
        f"Runs that ran: {s['ran']}; under-estimated {s['under']}, at or over {s['over']}; estimate ÷ measured "
        f"{s['min_ratio']:.2f}–{s['max_ratio']:.2f} (median {s['median_ratio']:.2f}). Read oom by the estimate "
        f"though they ran: {len(s['ran_but_oom'])}{': ' + '; '.join(s['ran_but_oom']) if s['ran_but_oom'] else ''}. "
        f"Runs that ran out of memory: {s['oom_rows']}, of them read oom by the estimate: {len(s['oom_caught'])}.",
        "",
        f"Per term: {state['from']} → {state['to']} changes only the data-parallel degree; the measured peak falls "
        f"{state['measured_fall_gib']:.1f} GiB, the estimated params + grads + optimizer state "
        f"{state['estimated_state_fall_gib']:.1f} GiB (activations {state['estimated_activation_fall_gib']:.1f}): "
        "the sharded state is counted as it is held; what the estimate misses there is not sharded (activations, "
        "the loss's logits, DeepEP's buffers).",
        "",
        f"Margin: **{margin:.0%}** = 1 − the fullest run's measured ÷ device, rounded down (launcher/perf/memory.py "
        f"MEMORY_MARGIN = {MEMORY_MARGIN:.0%}). It is the memory the fullest published run left free, so an exact "
        "estimate never calls a run that ran an oom; it is no bound on the estimate's error: it covers the "
        f"under-estimate of {s['covered_by_margin']} of {s['ran']} runs (estimate ÷ measured ≥ {1 - margin:.2f}).",
        "",
    ]
    atomic_write_text(out / "memory_published.md", "\n".join(md))


def main(argv: list[str] | None = None) -> int:
    corpus = read(SCALING)
    rows = [scored(r, corpus) for r in read(MEMORY)]
    margin = derived_margin(rows)
    write(RESULTS, rows, margin=margin, state=strong_scaling_state(rows))
    print(f"memory_published: {len(rows)} rows; derived margin {margin:.0%} (MEMORY_MARGIN {MEMORY_MARGIN:.0%})")
    return 0 if math.isclose(margin, MEMORY_MARGIN) else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
