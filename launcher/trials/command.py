"""A `job=command` trial's command line and variables: the recipe's argv and env with each trial's
values put in (`${trial.world_size}` …, launcher/config/job.py), as the payload an executor runs.

Pure: the words are data, never shell text; the job script quotes each one (launcher/slurm/render.py).
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from launcher.config.errors import ConfigError
from launcher.config.job import REFERENCE, TRIAL_ALIASES, TRIAL_KEYS, JobConfig, config_value, unknown_key
from launcher.trials.spec import Trial

METER_FILE = "meter.jsonl"
"""Where `launcher.meter` writes in the trial folder (LAUNCHER_METER_FILE names it)."""


def trial_values(trial: Trial, trial_dir: Path) -> dict[str, str]:
    """`${trial.KEY}` → the trial's value as text, every key of TRIAL_KEYS, and the aliases."""
    values = {
        "world_size": trial.world_size,
        "nodes": trial.nodes,
        "gpus_per_node": trial.world_size // max(trial.nodes, 1),
        "micro": trial.micro,
        "accum": trial.accum,
        "global_batch": trial.global_batch,
        "dp": trial.dp,
        "tp": trial.tp,
        "pp": trial.pp,
        "steps": trial.steps,
        "warmup_steps": trial.warmup_steps,
        "dir": trial_dir,
        "id": trial.trial_id,
        "repeat": trial.repeat,
    }
    assert values.keys() == TRIAL_KEYS.keys(), "TRIAL_KEYS and trial_values must name the same keys"
    out = {f"trial.{k}": str(v) for k, v in values.items()}
    return out | {alias: out[f"trial.{key}"] for alias, key in TRIAL_ALIASES.items()}


def resolve_text(text: str, where: str, values: Mapping[str, str], config: Mapping[str, Any]) -> str:
    """`text` with each `${key}` replaced: a trial value, else a config scalar; ConfigError names
    an unknown key (one line, the keys there are)."""

    def one(m: Any) -> str:
        if m.group(1):  # `\${…}`: literal text
            return "${" + m.group(2) + "}"
        key = m.group(2).strip()
        if key in values:
            return values[key]
        found = config_value(config, key)
        if found is None:
            raise ConfigError(unknown_key(where, text, key))
        return found

    return REFERENCE.sub(one, text)


def command_words(
    job: JobConfig, trial: Trial, trial_dir: Path, config: Mapping[str, Any]
) -> tuple[list[str], list[tuple[str, str]]]:
    """(argv, env) of `trial`'s command: the recipe's with the trial's values, LAUNCHER_METER_FILE set."""
    values = trial_values(trial, trial_dir)
    argv = [resolve_text(w, f"job.argv[{i}]", values, config) for i, w in enumerate(job.argv)]
    env = [(name, resolve_text(v, f"job.env.{name}", values, config)) for name, v in job.env.items()]
    return argv, [*env, ("LAUNCHER_METER_FILE", str(trial_dir / METER_FILE))]
