"""The plan `launcher plan … --output FILE` saves beside its table, as FILE with `.json` (plan.csv →
plan.json): what a later `launcher run --from plan.json` needs to start the recommended candidate.

It holds the user's recipe folder, the overrides the plan composed (for a comma plan, those of the
recommended combination), the cluster, and the recommended candidate: its size, layout degrees,
batch split and checkpointing, with the overrides that run it on top of the plan's. JSON, so a user
can read it; the table stays what `--output` always wrote. Read back here too, so the format has one
home: every way a file is not a runnable saved plan is one ConfigError line.
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd

from launcher.config.errors import ConfigError
from launcher.config.recipe_folders import user_recipes
from launcher.config.schema import LauncherConfig
from launcher.io import atomic_write_text, read_json
from launcher.layouts import LAYOUTS, DataParallel
from launcher.perf.candidates import Candidate
from launcher.perf.plan_table import OOM, Forecast
from launcher.results.policy import Recommendation
from launcher.trials.layout import virtual_stages
from launcher.trials.spec import make_trial

FORMAT = "launcher saved plan"
"""The `format` field that tells a saved plan from any other JSON file."""
VERSION = 1
RUNNABLE = "predicted"
"""The status a recommended candidate must have to be started (not `oom (predicted)`, not `impossible`)."""
TABLES = (".csv", ".parquet")


def saved_path(output: str | Path) -> Path:
    """Where the plan of `--output FILE` is saved: FILE with the suffix `.json`."""
    return Path(output).with_suffix(".json")


def check_saved_path(output: str | None) -> None:
    """Before anything is computed: saving the plan never overwrites a JSON file that is not a saved plan."""
    if output is None:
        return
    path = saved_path(output)
    if path.exists() and _format_of(path) != FORMAT:
        raise ConfigError(
            f"--output {output!r} saves the plan beside the table as {str(path)!r}, which exists and is not a "
            "saved plan; move it, or choose another --output"
        )


def _format_of(path: Path) -> Any:
    try:
        doc = read_json(path)
    except (OSError, ValueError):
        return None
    return doc.get("format") if isinstance(doc, dict) else None


# --- saving ---------------------------------------------------------------------------------------


def save_table_plan(
    output: str,
    *,
    recipes: str | None,
    variants: Sequence[tuple[str, Sequence[str]]],
    configs: Sequence[tuple[str, LauncherConfig]],
    forecast: Forecast,
) -> Path:
    """`launcher plan`'s saved plan: the recommended combination's overrides, its layout as the recipe sets it."""
    rec = forecast.recommendation
    label = rec.variant if rec.world_size is not None else configs[0][0]
    over, cfg = dict(variants)[label], dict(configs)[label]
    candidate = None
    if rec.world_size is not None:
        trial = make_trial(cfg, index=0, world_size=rec.world_size, steps=1, warmup_steps=0)
        par, pipelined = cfg.parallel, LAYOUTS[trial.layout].splits("pp")
        candidate = {
            "candidate": trial.layout,
            "layout": trial.layout,
            **{d: getattr(trial, d) for d in ("dp", "tp", "pp", "cp", "ep")},
            "virtual_stages": virtual_stages(par) if pipelined else 1,
            "micro_batch": trial.micro // trial.microbatches,
            "microbatches": trial.microbatches,
            "accum": trial.accum,
            "global_batch": trial.global_batch,
            "activation_checkpointing": cfg.model.activation_checkpointing,
            "reshard_after_forward": par.reshard_after_forward if _fsdp(trial.layout) else None,
            "overrides": [],  # the recipe's own layout: the plan's overrides run it
        }
    return _save(output, "launcher plan", recipes, over, cfg, rec, forecast.table, candidate)


def save_search_plan(
    output: str,
    *,
    recipes: str | None,
    overrides: Sequence[str],
    cfg: LauncherConfig,
    forecast: Forecast,
    best: Candidate | None,
) -> Path:
    """`launcher plan --search`'s saved plan: the best candidate at the recommended size, with its overrides."""
    candidate = None
    if best is not None:
        candidate = {
            "candidate": best.label,
            "layout": best.layout,
            **{d: getattr(best, d) for d in ("dp", "tp", "pp", "cp", "ep", "virtual_stages", "micro_batch")},
            "microbatches": best.microbatches,
            "accum": best.accum,
            "global_batch": best.global_batch,
            "activation_checkpointing": best.checkpointing,
            "reshard_after_forward": best.reshard_after_forward,
            "fsdp_sync_each_microstep": best.sync_each_microstep,
            "overrides": best.overrides(),
        }
    rec = forecast.recommendation
    return _save(output, "launcher plan --search", recipes, overrides, cfg, rec, forecast.table, candidate)


def saved_line(path: Path, rec: Recommendation) -> str:
    """What `plan --output` says of the plan it saved."""
    if rec.world_size is None:
        return f"plan saved to {path} (it recommends no size, so launcher run --from {path} has nothing to start)"
    return f"plan saved to {path}: launcher run --from {path} starts its recommended candidate"


def _fsdp(layout: str) -> bool:
    return LAYOUTS[layout].data_parallel == DataParallel.fsdp


def _save(
    output: str,
    saved_by: str,
    recipes: str | None,
    overrides: Sequence[str],
    cfg: LauncherConfig,
    rec: Recommendation,
    table: pd.DataFrame,
    candidate: dict | None,
) -> Path:
    doc: dict[str, Any] = {
        "format": FORMAT,
        "version": VERSION,
        "saved_by": saved_by,
        "table": Path(output).name,
        "recipes": user_recipes(recipes),
        "overrides": list(overrides),
        "cluster": {"name": cfg.cluster.name, "device": cfg.cluster.device_name},
        "model": cfg.model.name,
        "reason": rec.reason,
        "recommended": None if candidate is None else _row_figures(table, rec) | candidate,
    }
    path = saved_path(output)
    atomic_write_text(path, json.dumps(doc, indent=2, ensure_ascii=False) + "\n")  # readable: ≥, ×, in order
    return path


def _row_figures(table: pd.DataFrame, rec: Recommendation) -> dict:
    """The recommended row's size and predicted figures, as plain JSON values."""
    rows = table[table["world_size"] == rec.world_size]
    if "variant" in rows and rec.variant:
        rows = rows[rows["variant"] == rec.variant]
    row = rows.iloc[0]
    keys = ("nodes", "status", "tokens_per_s", "tokens_per_s_lo", "tokens_per_s_hi", "memory_gib")
    return {"gpus": rec.world_size, "variant": rec.variant} | {k: _plain(row.get(k)) for k in keys}


def _plain(value: Any) -> Any:
    """A numpy scalar as its Python value; NaN and missing as null."""
    value = value.item() if hasattr(value, "item") else value
    return None if value is None or (isinstance(value, float) and math.isnan(value)) else value


# --- reading --------------------------------------------------------------------------------------


@dataclass(kw_only=True, frozen=True)
class SavedPlan:
    """A saved plan whose recommended candidate can be started."""

    path: Path
    """The .json read."""
    saved_by: str
    """`launcher plan` or `launcher plan --search`."""
    recipes: str | None
    """The user's recipe folder the plan was composed from (None: the bundled recipes)."""
    overrides: list[str]
    """The overrides the plan composed."""
    reason: str
    """Why the plan recommends its size, one sentence."""
    recommended: dict
    """The candidate: gpus, nodes, status, predicted figures, layout degrees, batch split, and
    `overrides` (what runs it on top of the plan's)."""


def is_saved_plan_path(path: Path) -> bool:
    """`--from` names a file (a saved plan or its table), not a sweep folder."""
    return path.is_file() or path.suffix.lower() in (".json", *TABLES)


def read_saved(path: Path) -> SavedPlan:
    """The saved plan at `path` (its .json, or the table it was saved beside); ConfigError, one line,
    for a file that is not one, a table saved without one, or a plan that recommends nothing runnable."""
    src = f"--from {str(path)!r}"
    json_path = saved_path(path) if path.suffix.lower() in TABLES else path
    if not json_path.is_file():
        if path != json_path and path.is_file():
            raise ConfigError(
                f"{src} is a plan's table with no saved plan beside it ({json_path.name}: it was written by a launcher "
                f"that saved the table only); plan again with --output {path.name} to save it, then run --from "
                f"{json_path.name}"
            )
        raise ConfigError(f"{src}: no such file; pass the .json that launcher plan … --output FILE saves beside FILE")
    doc = _doc(json_path, src)
    if path != json_path and doc.get("table") != path.name:  # plan.csv and plan.parquet share plan.json
        raise ConfigError(
            f"{src}: the plan beside it, {json_path.name}, was saved with the table {doc.get('table')!r}, not "
            f"{path.name!r}; pass --from {json_path.name} to run that plan, or plan again with --output {path.name}"
        )
    rec = doc.get("recommended")
    if rec is None:
        raise ConfigError(
            f"{src}: the plan recommends no size ({doc.get('reason') or 'no reason saved'}); plan other sizes "
            "(--gpus) or another recipe, and run --from that plan"
        )
    _check_candidate(rec, src)
    return SavedPlan(
        path=json_path,
        saved_by=str(doc.get("saved_by", "launcher plan")),
        recipes=doc.get("recipes"),
        overrides=list(doc["overrides"]),
        reason=str(doc.get("reason", "")),
        recommended=rec,
    )


def _doc(path: Path, src: str) -> dict:
    """The file's document, or one line saying why it is not a saved plan."""
    try:
        doc = read_json(path)
    except (OSError, ValueError) as exc:
        why = f"not JSON: {exc}" if isinstance(exc, ValueError) else str(exc)
        raise ConfigError(f"{src} is not a saved plan ({why}); pass the .json launcher plan … --output saves") from None
    if not isinstance(doc, dict) or doc.get("format") != FORMAT:
        raise ConfigError(
            f'{src} is not a saved plan (no "format": {json.dumps(FORMAT)}); pass the .json that '
            "launcher plan … --output FILE saves beside FILE"
        )
    if doc.get("version") != VERSION:
        raise ConfigError(
            f"{src} is a saved plan of format version {doc.get('version')!r}, this launcher reads {VERSION}; "
            "plan again with this launcher"
        )
    overrides = doc.get("overrides")
    if not isinstance(overrides, list) or not all(isinstance(o, str) for o in overrides):
        raise ConfigError(f'{src} is not a saved plan ("overrides" is not a list of strings); plan again')
    return doc


def _check_candidate(rec: Any, src: str) -> None:
    """The recommended candidate names a size, runnable overrides, and a status that runs."""
    if not isinstance(rec, dict):
        raise ConfigError(f'{src} is not a saved plan ("recommended" is not an object); plan again')
    gpus, over = rec.get("gpus"), rec.get("overrides")
    if not isinstance(gpus, int) or isinstance(gpus, bool) or gpus < 1:
        raise ConfigError(f'{src}: the recommended candidate has no size ("gpus": {json.dumps(gpus)}); plan again')
    if not isinstance(over, list) or not all(isinstance(o, str) for o in over):
        raise ConfigError(f'{src}: the recommended candidate has no "overrides" list; plan again')
    if rec.get("status") != RUNNABLE:
        raise ConfigError(
            f"{src}: the recommended candidate at {gpus} GPUs is {rec.get('status')!r}, not {RUNNABLE!r}, so it "
            f"would not run{' (over the memory limit)' if rec.get('status') == OOM else ''}; plan again "
            "(launcher plan --search chooses a candidate that fits)"
        )
