"""Per-trial files → one table (CSV + parquet), rebuilt from the trial folders every time."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pandas as pd

from launcher.results.policy import Pricing, add_cost, add_scaling
from launcher.trials.ends import mentions_oom
from launcher.io import atomic_write_text

TABLE_SCHEMA_VERSION = 4  # 2: + repeat; 3: + variant, tp, pp, bubbles, collective time; 4: + cost to budget, model inputs

COLUMNS = [
    "trial_id", "variant", "world_size", "nodes", "repeat", "layout", "dp", "tp", "pp", "micro", "accum",
    "global_batch", "status", "tokens_per_s", "tokens_per_s_per_device", "samples_per_s",
    "step_time_median_s", "step_time_p10_s", "step_time_p90_s",
    "speedup", "efficiency", "scaling", "mfu", "ccr", "busbw_gbps", "allreduce_time_s", "compute_time_s",
    "bubble_measured", "bubble_theory", "collective_time_s",
    "rank_spread", "peak_memory_mb", "loss_first", "loss_last", "usd_per_1m_tokens", "device_hours_per_1m_tokens",
    "hours_to_budget", "device_hours_to_budget", "usd_to_budget", "device_hours", "allreduce_bytes", "cpu_contention",
    "ranks_per_node", "lr", "hosts", "reason",
]  # fmt: skip
_LAYOUT_COLUMNS = ["bubble_measured", "bubble_theory", "collective_time_s"]

_METRIC_COLUMNS = [
    "tokens_per_s", "tokens_per_s_per_device", "samples_per_s", "step_time_median_s", "step_time_p10_s",
    "step_time_p90_s", "mfu", "ccr", "busbw_gbps", "allreduce_time_s", "compute_time_s", "rank_spread",
    "loss_first", "loss_last", "allreduce_bytes", "cpu_contention",
]  # fmt: skip


def _load(path: Path) -> dict[str, Any] | None:
    try:
        return json.loads(path.read_text())
    except (OSError, json.JSONDecodeError):
        return None


def trial_row(trial: dict[str, Any], record: dict[str, Any] | None, outcome: dict[str, Any] | None) -> dict[str, Any]:
    """One table row. The payload's own record decides success; the executor's outcome
    explains a trial that left no record (or a failed one)."""
    row: dict[str, Any] = {k: trial.get(k) for k in ("trial_id", "world_size", "nodes", "layout", "dp", "tp", "pp",
                                                     "micro", "accum", "global_batch", "scaling", "lr")}  # fmt: skip
    row["repeat"] = trial.get("repeat", 0)
    row["variant"] = trial.get("variant") or None  # null, not "", when nothing was swept (CSV == parquet)
    row.update({k: None for k in _METRIC_COLUMNS + _LAYOUT_COLUMNS})
    row.update(peak_memory_mb=None, hosts=None)
    wall_s = (record or {}).get("wall_s", (outcome or {}).get("wall_s"))  # what the trial held its devices for
    row["device_hours"] = wall_s * trial["world_size"] / 3600 if wall_s is not None else None
    row["ranks_per_node"] = -(-trial["world_size"] // trial["nodes"]) if trial.get("nodes") else None
    executor_reason = (outcome or {}).get("reason")
    if record is None:
        if outcome is None:
            row["status"], row["reason"] = "pending", None
        elif outcome.get("executor") == "search":
            row["status"], row["reason"] = outcome.get("status", "skipped"), executor_reason
        elif outcome.get("executor") == "slurm":
            # Slurm's state is the story: cancelled, timeout, node_fail, running, … A job that
            # COMPLETED without a record still failed: the record is the proof of a finished trial.
            status = outcome.get("status", "unknown")
            row["status"] = "failed" if status == "completed" else status
            row["reason"] = executor_reason
            if status == "completed":
                lost = f"job {outcome.get('job')} completed but the payload wrote no record"
                row["reason"] = f"{lost}; {executor_reason}" if executor_reason else lost
        else:
            row["status"], row["reason"] = "failed", f"no record written: {executor_reason}"
        if row["status"] == "failed" and mentions_oom(row["reason"]):
            row["status"] = "oom"  # a rank other than 0 ran out of memory: its log says so
        return row
    row["status"] = record["status"]
    # The executor names the rank that failed first (the cause); the payload's own reason follows.
    reasons = [r for r in (executor_reason, record.get("reason")) if r]
    if record["status"] == "completed":
        requeues = (outcome or {}).get("requeues") or 0
        resumed = (record.get("metrics") or {}).get("resumed_from_step") or 0
        if executor_reason:
            reasons = [f"record complete, but afterwards {executor_reason}"]
        elif requeues:  # a requeue is worth saying, even when all ended well
            reasons = [f"requeued {requeues}×, then completed" + (f" (resumed from step {resumed})" if resumed else "")]
    elif record["status"] in ("oom", "nan"):
        reasons = [record["reason"]]  # the payload named it; how the ranks then exited adds nothing
    row["reason"] = "; ".join(reasons) or None
    m = record.get("metrics") or {}
    row.update({k: m.get(k) for k in _METRIC_COLUMNS})
    row.update({k: (m.get("layout") or {}).get(k) for k in _LAYOUT_COLUMNS})
    if m.get("peak_memory_bytes") is not None:
        row["peak_memory_mb"] = m["peak_memory_bytes"] / 2**20
    if record.get("hosts"):
        row["hosts"] = ",".join(sorted(set(record["hosts"])))
        row["nodes"] = record.get("nodes", row["nodes"])
    return row


_COST_COLUMNS = ["speedup", "efficiency", "usd_per_1m_tokens", "device_hours_per_1m_tokens", "hours_to_budget",
                 "device_hours_to_budget", "usd_to_budget"]  # fmt: skip


def build_table(sweep_dir: Path, pricing: Pricing | None = None) -> pd.DataFrame:
    """Read every `trials/*/` folder of a sweep into the results table."""
    rows = []
    for tdir in sorted((sweep_dir / "trials").glob("*/")):
        trial = _load(tdir / "trial.json")
        if trial is None:
            continue
        rows.append(trial_row(trial["trial"], _load(tdir / "record.json"), _load(tdir / "outcome.json")))
    df = pd.DataFrame(rows, columns=[c for c in COLUMNS if c not in _COST_COLUMNS])
    for col in _METRIC_COLUMNS + _LAYOUT_COLUMNS + ["peak_memory_mb", "device_hours"]:
        df[col] = pd.to_numeric(df[col], errors="coerce")
    df = add_cost(add_scaling(df), pricing or Pricing())
    return df[COLUMNS].sort_values(["trial_id"]).reset_index(drop=True)


def write_table(df: pd.DataFrame, sweep_dir: Path) -> None:
    """results.csv and results.parquet, each replaced atomically."""
    atomic_write_text(sweep_dir / "results.csv", df.to_csv(index=False))
    tmp = sweep_dir / ".results.parquet.tmp"
    df.to_parquet(tmp, index=False)
    tmp.replace(sweep_dir / "results.parquet")
