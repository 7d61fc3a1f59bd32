"""Per-trial files → one table (CSV + parquet), rebuilt from the trial folders every time."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pandas as pd

from launcher.io import atomic_write_text
from launcher.results.cost import Pricing, add_cost
from launcher.results.flags import trial_flags
from launcher.results.scaling import add_scaling, interval_columns
from launcher.trials.ends import NOT_STARTED, failure_status
from launcher.trials.folder import TrialFiles, missing_folder, read_folder, read_sweep_spec, trial_dirs


COLUMNS = [
    "trial_id", "variant", "world_size", "nodes", "repeat", "layout", "dp", "tp", "pp", "micro", "accum",
    "global_batch", "status", "tokens_per_s", "tokens_per_s_lo", "tokens_per_s_hi", "tokens_per_s_per_device",
    "samples_per_s", "step_time_median_s", "step_time_p10_s", "step_time_p90_s",
    "speedup", "efficiency", "efficiency_lo", "efficiency_hi", "scaling", "mfu", "hfu", "peak_flops_per_device", "ccr", "busbw_gbps", "allreduce_time_s",
    "compute_time_s",
    "bubble_measured", "bubble_theory", "collective_time_s",
    "rank_spread", "peak_memory_mb", "loss_first", "loss_last", "usd_per_1m_tokens", "device_hours_per_1m_tokens",
    "hours_to_budget", "device_hours_to_budget", "usd_to_budget", "device_hours", "allreduce_bytes", "cpu_contention",
    "ranks_per_node", "lr", "precision", "peak_source", "peak_mismatch", "hosts", "flags", "reason",
]
_LAYOUT_COLUMNS = ["bubble_measured", "bubble_theory", "collective_time_s"]
# What MFU means: the precision that ran and the peak it was divided by (metrics of the record).
_PEAK_COLUMNS = ["precision", "peak_flops_per_device", "peak_source", "peak_mismatch"]

_METRIC_COLUMNS = [
    "tokens_per_s", "tokens_per_s_per_device", "samples_per_s", "step_time_median_s", "step_time_p10_s",
    "step_time_p90_s", "mfu", "hfu", "ccr", "busbw_gbps", "allreduce_time_s", "compute_time_s", "rank_spread",
    "loss_first", "loss_last", "allreduce_bytes", "cpu_contention",
]


def _blank_row(trial: dict[str, Any]) -> dict[str, Any]:
    """The spec's columns, every measurement empty."""
    row: dict[str, Any] = {k: trial.get(k) for k in ("trial_id", "world_size", "nodes", "layout", "dp", "tp", "pp",
                                                     "micro", "accum", "global_batch", "scaling", "lr")}
    row["repeat"] = trial.get("repeat", 0)
    row["variant"] = trial.get("variant") or None  # null, not "", when nothing was swept (CSV == parquet)
    row.update({k: None for k in _METRIC_COLUMNS + _LAYOUT_COLUMNS + _PEAK_COLUMNS})
    row.update(peak_memory_mb=None, hosts=None, flags=None)
    return row


def _no_record(outcome: dict[str, Any] | None) -> tuple[str, str | None]:
    """(status, reason) of a trial the payload left no record for, from the executor's outcome."""
    if outcome is None:
        return NOT_STARTED, None  # `launcher status`'s word too: nothing ran, and nothing waits in a queue
    reason = outcome.get("reason")
    if outcome.get("status") == "cancelled":  # stopped by the user (run/stopped.py): not a failure of the trial
        return "cancelled", reason
    if outcome.get("executor") == "search":
        return outcome.get("status", "skipped"), reason
    if outcome.get("executor") == "estimate":  # never launched: its memory estimate cannot fit
        return outcome.get("status", "oom"), reason
    if outcome.get("executor") == "slurm":
        # Slurm's state is the story: cancelled, timeout, node_fail, running, … A job that
        # COMPLETED without a record still failed: the record is the proof of a finished trial.
        status = outcome.get("status", "unknown")
        if status != "completed":
            return status, reason
        lost = f"job {outcome.get('job')} completed but the payload wrote no record"
        return "failed", f"{lost}; {reason}" if reason else lost
    if reason:
        # A rank the kernel (or its cgroup) killed for memory: the executor saw it (run/local.py).
        return "oom" if outcome.get("oom") else "failed", f"no record written: {reason}"
    ranks = outcome.get("ranks") or []
    if ranks and all(isinstance(r, dict) and r.get("returncode") == 0 for r in ranks):
        # Every rank said success, yet rank 0 never wrote its record: say exactly that.
        return "failed", f"no record written, though all {len(ranks)} rank(s) exited with code 0"
    return "failed", "no record written, and the executor gave no reason"


def _record_reason(record: dict[str, Any], outcome: dict[str, Any] | None) -> str | None:
    """The executor names the rank that failed first (the cause); the payload's own reason follows."""
    executor_reason = (outcome or {}).get("reason")
    reasons = list(dict.fromkeys(r for r in (executor_reason, record.get("reason")) if r))  # each said once
    if record["status"] == "completed":
        requeues = (outcome or {}).get("requeues") or 0
        resumed = (record.get("metrics") or {}).get("resumed_from_step") or 0
        if executor_reason:
            reasons = [f"record complete, but afterwards {executor_reason}"]
        elif requeues:  # a requeue is worth saying, even when all ended well
            reasons = [f"requeued {requeues}×, then completed" + (f" (resumed from step {resumed})" if resumed else "")]
    elif record["status"] in ("oom", "nan") and record.get("reason"):
        reasons = [record["reason"]]  # the payload named it; how the ranks then exited adds nothing
    return "; ".join(reasons) or None


def superseded(outcome: dict[str, Any] | None) -> bool:
    """Whether a record on disk belongs to an attempt Slurm has since requeued: the job is queued
    or running again (requeued from outside, preempted, a node failed), so its next attempt will
    write the trial's record. A job still running its only attempt has written no record yet."""
    if not outcome or outcome.get("executor") != "slurm" or outcome.get("final"):
        return False
    return outcome.get("status") in ("pending", "requeued", "running") and bool(outcome.get("requeues"))


def trial_row(trial: dict[str, Any], record: dict[str, Any] | None, outcome: dict[str, Any] | None) -> dict[str, Any]:
    """One table row. The payload's own record decides success; the executor's outcome
    explains a trial that left no record (or a failed one)."""
    row = _blank_row(trial)
    world_size, nodes = trial.get("world_size"), trial.get("nodes")
    wall_s = (record or {}).get("wall_s", (outcome or {}).get("wall_s"))  # what the trial held its devices for
    row["device_hours"] = wall_s * world_size / 3600 if wall_s is not None and world_size else None
    row["ranks_per_node"] = -(-world_size // nodes) if world_size and nodes else None
    if record is not None and superseded(outcome):
        record = None  # an earlier attempt's: the job runs the trial again, and its record replaces this one
    if record is None:
        status, row["reason"] = _no_record(outcome)
        row["status"] = failure_status(status, row["reason"])  # a rank other than 0 ran out of memory
        return row
    row["reason"] = _record_reason(record, outcome)
    row["status"] = failure_status(record["status"], row["reason"])  # rank 0 failed after another's OOM
    m = record.get("metrics") or {}
    layout = m.get("layout") if isinstance(m.get("layout"), dict) else {}
    row.update({k: m.get(k) for k in _METRIC_COLUMNS})
    row.update({k: layout.get(k) for k in _LAYOUT_COLUMNS})
    row.update({k: m.get(k) for k in _PEAK_COLUMNS})
    row["flags"] = trial_flags(m, world_size, record.get("hosts"))
    if isinstance(m.get("peak_memory_bytes"), (int, float)):
        row["peak_memory_mb"] = m["peak_memory_bytes"] / 2**20
    if record.get("hosts"):
        row["hosts"] = ",".join(sorted(set(map(str, record["hosts"]))))
        row["nodes"] = record.get("nodes", row["nodes"])
    return row


def corrupt_row(trial: dict[str, Any], files: TrialFiles) -> dict[str, Any]:
    """A trial with a damaged file: status `corrupt`, the reason naming each damaged file. What the
    readable files hold stays in the row (a good record's measurements are not thrown away), but
    the status does not claim an end that the damaged file may contradict."""
    row = trial_row(trial, files.record.doc, files.outcome.doc)
    said = f"the record says {row['status']}" if files.record.ok else None
    row["status"] = "corrupt"
    row["reason"] = "; ".join([*files.problems, *([said] if said else [])])
    return row


def folder_row(tdir: Path, planned: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """The row of one trial folder, whatever state its files are in. An unreadable trial.json
    still gives a row: the trial id is the folder's name, the rest what sweep.json planned."""
    files = read_folder(tdir)
    trial = files.trial.doc["trial"] if files.trial.ok else planned.get(tdir.name, {"trial_id": tdir.name})
    if files.problems:
        return corrupt_row(trial, files)
    return trial_row(trial, files.record.doc, files.outcome.doc)


def _planned(sweep_dir: Path) -> dict[str, dict[str, Any]]:
    """trial id → the trial as sweep.json planned it ({} when sweep.json cannot say)."""
    spec = read_sweep_spec(sweep_dir)
    trials = (spec.doc or {}).get("trials") or []
    return {t["trial_id"]: t for t in trials if isinstance(t, dict) and isinstance(t.get("trial_id"), str)}


# Added from the other rows (scaling, intervals, cost), not read from a trial's own files.
_DERIVED = ["speedup", "efficiency", *interval_columns(), "usd_per_1m_tokens", "device_hours_per_1m_tokens",
                 "hours_to_budget", "device_hours_to_budget", "usd_to_budget"]


def build_table(sweep_dir: Path, pricing: Pricing | None = None) -> pd.DataFrame:
    """Read every `trials/*/` folder of a sweep into the results table: one row per folder, and
    one for each trial sweep.json plans whose folder is gone (never a silently missing row)."""
    planned = _planned(sweep_dir)
    tdirs = trial_dirs(sweep_dir)
    rows = [folder_row(tdir, planned) for tdir in tdirs]
    for trial_id in sorted(set(planned) - {t.name for t in tdirs}):
        row = trial_row(planned[trial_id], None, None)
        rows.append({**row, "status": "corrupt", "reason": missing_folder(trial_id)})
    df = pd.DataFrame(rows, columns=[c for c in COLUMNS if c not in _DERIVED])
    for col in _METRIC_COLUMNS + _LAYOUT_COLUMNS + ["peak_flops_per_device", "peak_memory_mb", "device_hours"]:
        df[col] = pd.to_numeric(df[col], errors="coerce")
    df = add_cost(add_scaling(df), pricing or Pricing())
    return df[COLUMNS].sort_values(["trial_id"]).reset_index(drop=True)


def peak_mismatch_line(df: pd.DataFrame) -> str | None:
    """One line for the table's footer when some trial's explicit peak does not fit the precision
    it ran (its MFU is then off by that factor); None when none is flagged."""
    if "peak_mismatch" not in df:
        return None
    notes = sorted({str(n) for n in df["peak_mismatch"].dropna() if n})
    return "MFU " + "; ".join(notes) if notes else None


def write_table(df: pd.DataFrame, sweep_dir: Path) -> None:
    """results.csv and results.parquet, each replaced atomically."""
    atomic_write_text(sweep_dir / "results.csv", df.to_csv(index=False))
    tmp = sweep_dir / ".results.parquet.tmp"
    df.to_parquet(tmp, index=False)
    tmp.replace(sweep_dir / "results.parquet")
