"""`launcher run`: one run of the recipe (run.world_size locally, cluster.nodes on Slurm).

A run is a one-trial sweep (same folder layout, record and table) that checkpoints when asked
to; `--dry-run` prints the sbatch script (Slurm) or each rank's command line (local). After a
run it prints the run's own figures, from its record, and where its checkpoints and logs are.
`--from results/<sweep-id>` (or a plan saved by `plan --output`, plan.json) runs what it recommends (run_from.py).
"""

from __future__ import annotations

import argparse
import dataclasses
import math
import sys
from pathlib import Path
from typing import Any

from launcher.config.cluster_traits import cluster_traits
from launcher.config.compose import compose_config
from launcher.config.schema import LauncherConfig
from launcher.io import read_json
from launcher.run import sweep as sw
from launcher.run.executor import executor_for
from launcher.run.run_from import choose
from launcher.trials.folder import read_record, read_submission, trial_dir
from launcher.trials.spec import Trial, sweep_trials


def as_sweep(cfg: LauncherConfig) -> LauncherConfig:
    """A single run is a one-trial sweep: same folder layout, record and table."""
    r = cfg.run
    sizes = (
        {"world_sizes": [r.world_size]} if cluster_traits(cfg.cluster).ranks_here else {"nodes": [cfg.cluster.nodes]}
    )
    sweep = dataclasses.replace(
        cfg.sweep, **sizes, steps=r.steps, warmup_steps=r.warmup_steps, repeats=1, pack=False, search="grid"
    )
    return dataclasses.replace(cfg, sweep=sweep)


def run_trials(cfg: LauncherConfig) -> list[Trial]:
    """The one trial of `launcher run`, checkpointing when asked to."""
    r = cfg.run
    checkpoint = bool(r.checkpoint_every or r.requeue)
    return [
        dataclasses.replace(t, checkpoint=checkpoint, checkpoint_every=r.checkpoint_every) for t in sweep_trials(cfg)
    ]


def dry_run(cfg: LauncherConfig, overrides: list[str]) -> int:
    (trial,) = run_trials(cfg)
    executor_for(cfg).dry_run(trial, make_folder=lambda: sw.create_sweep_dir(cfg, [(trial, cfg)], overrides))
    return 0


def main(args: argparse.Namespace) -> int:
    given, recipes = list(args.overrides), args.recipes
    if getattr(args, "from_sweep", None):  # the sweep's recommendation, said before anything runs
        chosen = choose(Path(args.from_sweep), given, recipes)
        print("\n".join(chosen.lines), file=sys.stderr)
        given, recipes = chosen.overrides, chosen.recipes
    overrides = [*given, *(["run.requeue=true"] if args.requeue else [])]
    cfg = as_sweep(compose_config(overrides, recipes))
    if args.dry_run:
        return dry_run(cfg, overrides)
    items = [(t, cfg) for t in run_trials(cfg)]
    sw.refuse_unrunnable(cfg, items)  # as a sweep does: a `_target_` that does not import is one line, before any job
    prepared = sw.PreparedSweep(cfg=cfg, items=items, skipped=[])
    result = sw.run_sweep(prepared, given, progress_bars=not args.quiet)
    if result is None:
        return 0
    row = result.table.iloc[0]
    print(
        "\n".join(
            run_summary(
                result.sweep_dir,
                row["trial_id"],
                status=row["status"],
                reason=row["reason"],
                usd_per_1m_tokens=row.get("usd_per_1m_tokens"),
            )
        )
    )
    return 0 if row["status"] == "completed" else 1


# --- what a finished run says -------------------------------------------------------------------


def _num(value: Any) -> float | None:
    """A finite number, or None for null, NaN and anything else."""
    return float(value) if isinstance(value, (int, float)) and math.isfinite(value) else None


def run_summary(
    sweep_dir: Path, trial_id: str, *, status: str, reason: Any = None, usd_per_1m_tokens: Any = None
) -> list[str]:
    """The lines `launcher run` prints: what ran and how it ended, its figures (from record.json),
    and where its checkpoints, logs and report are."""
    tdir = trial_dir(sweep_dir, trial_id)
    record = read_record(tdir)
    doc = record.doc or {}
    trial, metrics = doc.get("trial") or {}, doc.get("metrics") or {}
    ended = status if not isinstance(reason, str) or not reason else f"{status} ({reason})"
    lines = [f"run {sweep_dir.name}: {ended}" + (f" — {_shape(doc, trial)}" if trial else "")]
    if record.corrupt:
        lines.append(f"  {record.reason}")
    lines += [f"  {label:<15}{text}" for label, text in _figures(trial, metrics, doc, usd_per_1m_tokens)]
    return lines + _where(sweep_dir, tdir)


def _count(n: Any, unit: str) -> str:
    return f"{n} {unit}" + ("" if n == 1 else "s")


def _shape(doc: dict, trial: dict) -> str:
    """`tiny_gpt, ddp, 2 ranks on 1 node (cluster local)` from the record."""
    cfg = doc.get("config") or {}
    model, cluster = (cfg.get("model") or {}).get("name", "?"), (cfg.get("cluster") or {}).get("name", "?")
    ranks, nodes = _count(trial.get("world_size", "?"), "rank"), _count(trial.get("nodes", 1), "node")
    return f"{model}, {trial.get('layout', '?')}, {ranks} on {nodes} (cluster {cluster})"


def _figures(trial: dict, m: dict, doc: dict, usd: Any) -> list[tuple[str, str]]:
    """(label, text) for each figure the record holds; a figure it lacks is left out."""
    out: list[tuple[str, str]] = []
    steps, warm, measured = trial.get("steps"), trial.get("warmup_steps"), m.get("steps_measured")
    if steps is not None:
        resumed = m.get("resumed_from_step") or 0
        more = f"{measured} measured after {warm} warm-up" if measured is not None else f"{warm} warm-up"
        out.append(("steps", f"{steps} ({more})" + (f"; resumed from step {resumed}" if resumed else "")))
    if (tok := _num(m.get("tokens_per_s"))) is not None:
        per_dev, samples = _num(m.get("tokens_per_s_per_device")) or 0.0, _num(m.get("samples_per_s")) or 0.0
        out.append(("tokens/s", f"{tok:,.0f} ({per_dev:,.0f} per device); {samples:,.1f} samples/s"))
    if (med := _num(m.get("step_time_median_s"))) is not None:
        p10, p90 = _num(m.get("step_time_p10_s")), _num(m.get("step_time_p90_s"))
        spread = f" (p10 {p10:.4f} s, p90 {p90:.4f} s)" if p10 is not None and p90 is not None else ""
        out.append(("step time", f"{med:.4f} s median{spread}"))
    first, last = _num(m.get("loss_first")), _num(m.get("loss_last"))
    if last is not None:
        out.append(("final loss", f"{last:.4f}" + (f" (first {first:.4f})" if first is not None else "")))
    if m:
        mfu = _num(m.get("mfu"))
        out.append(("mfu", f"{mfu:.1%}" if mfu is not None else "— (set cluster.peak_flops_per_device)"))
        usd = _num(usd)
        out.append(("$ per 1M tok", f"{usd:.4g}" if usd is not None else "— (set cluster.usd_per_device_hour)"))
    if (busbw := _num(m.get("busbw_gbps"))) is not None:
        out.append(("all-reduce", f"{busbw:.2f} GB/s bus bandwidth"))
    if (mem := _num(m.get("peak_memory_bytes"))) is not None:
        out.append(("peak memory", f"{mem / 2**20:,.0f} MiB per rank ({m.get('peak_memory_kind', 'measured')})"))
    if (wall := _num(doc.get("wall_s"))) is not None:
        out.append(("wall time", f"{wall:.1f} s in the payload"))
    return out


def _where(sweep_dir: Path, tdir: Path) -> list[str]:
    """Where the run's checkpoints, logs, record and report are."""
    lines = [f"checkpoints: {_checkpoints(tdir)}", f"logs: {_logs(tdir)}"]
    submission = read_submission(tdir).doc
    if submission and submission.get("job_id"):
        lines.append(f"batch log: {sweep_dir / 'jobs'}/slurm-{submission['job_id']}.out")
    lines.append(f"record: {tdir / 'record.json'}; report: {sweep_dir}/report.md, report.html")
    return lines


def _checkpoints(tdir: Path) -> str:
    folder = tdir / "checkpoint"
    if not folder.is_dir():
        return "none (set run.checkpoint_every, or --requeue on Slurm)"
    try:
        latest = read_json(folder / "latest.json")
        return f"{folder}/{latest['path']} (latest, step {int(latest['step'])})"
    except (OSError, ValueError, KeyError, TypeError):
        return f"{folder} (none complete yet)"


def _logs(tdir: Path) -> str:
    """Every log of the trial: all of them when few, else the first and last and how many."""
    logs = sorted(tdir.glob("*.log"), key=lambda p: (len(p.name), p.name))
    if not logs:
        return f"none in {tdir}"
    names = [p.name for p in logs]
    shown = ", ".join(names) if len(names) <= 4 else f"{names[0]} … {names[-1]} ({len(names)} files)"
    return f"{tdir}/ {shown}"
