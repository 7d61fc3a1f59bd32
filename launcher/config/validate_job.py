"""Checks on `job` (launcher/config/job.py) that hold for every trial: a command's argv, its
interpolation keys, its regex, its launch; run at plan time, before any folder exists."""

from __future__ import annotations

import os
import re
import shutil
import sys
from pathlib import Path

from launcher.config.checks import at_least, positive
from launcher.config.cluster_traits import cluster_traits
from launcher.config.errors import ConfigError
from launcher.config.job import REFERENCE, REGEX_GROUPS, TRIAL_ALIASES, TRIAL_KEYS, JobConfig, config_value, unknown_key
from launcher.config.plain import to_dict
from launcher.config.schema import LauncherConfig

_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,127}$")
# What the launcher sets for a command's ranks; a recipe's value would break the rendezvous or the meter.
_ENV_OWN = ("MASTER_ADDR", "MASTER_PORT", "RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "LAUNCHER_METER_FILE")
_TORCHRUN = ("torchrun", "torch.distributed.run", "torch.distributed.launch")
_PYTHONS = re.compile(r"^python(\d+(\.\d+)?)?$")


def check_job(cfg: LauncherConfig) -> None:
    """ConfigError (one line) on a command that no trial can run; a warning line for a program
    this host cannot find (the compute nodes may have it)."""
    job = cfg.job
    if job.kind != "command":
        return
    if not job.argv or not all(isinstance(w, str) for w in job.argv) or not job.argv[0]:
        raise ConfigError(
            f"job.argv={list(job.argv)!r} names no program; give the command as a list of words, e.g. "
            "job.argv=[python,train.py,--lr,3e-4]"
        )
    for where, text in [
        *((f"job.argv[{i}]", w) for i, w in enumerate(job.argv)),
        *((f"job.env.{k}", v) for k, v in job.env.items()),
    ]:
        _check_word(where, text)
    _check_references(cfg)
    _check_env(job)
    _check_metrics(job)
    _check_launch(job)
    for key, value, example in (("job.tokens_per_sample", job.tokens_per_sample, 4096),):
        if value is not None:
            at_least(key, value, 1, example)
    if job.flops_per_token is not None:
        positive("job.flops_per_token", job.flops_per_token, "6.2e9")
    at_least("job.probe_bytes", job.probe_bytes, 4, 64 * 2**20)
    _warn_missing_program(job.argv, local=cluster_traits(cfg.cluster).ranks_here)


def _check_word(where: str, text: str) -> None:
    """A word a job script carries: no NUL (no argv can hold one), no CR-LF (sbatch refuses the script)."""
    if "\x00" in text or "\r\n" in text:
        what = "a NUL character" if "\x00" in text else "a CR-LF (DOS) line break, which sbatch refuses in a script"
        raise ConfigError(f"{where} holds {what}; remove it")


def _check_references(cfg: LauncherConfig) -> None:
    known = {f"trial.{k}" for k in TRIAL_KEYS} | set(TRIAL_ALIASES)
    config = to_dict(cfg)
    words = [(f"job.argv[{i}]", w) for i, w in enumerate(cfg.job.argv)]
    words += [(f"job.env.{k}", v) for k, v in cfg.job.env.items()]
    for where, text in words:
        for m in REFERENCE.finditer(text):
            key = m.group(2).strip()
            if not m.group(1) and key not in known and config_value(config, key) is None:
                raise ConfigError(unknown_key(where, text, key))


def _check_env(job: JobConfig) -> None:
    for name in job.env:
        if not _ENV_NAME.fullmatch(name):
            raise ConfigError(
                f"job.env has {name!r}, not a shell variable name; write e.g. job.env={{NCCL_DEBUG: WARN}}"
            )
        if name in _ENV_OWN:
            raise ConfigError(f"job.env sets {name}, which the launcher sets for each rank; remove it from job.env")


def _check_metrics(job: JobConfig) -> None:
    if job.metrics != "regex":
        return
    groups = ", ".join(REGEX_GROUPS)
    if not job.pattern:
        raise ConfigError(
            f"job.metrics=regex needs job.pattern, a regex with a named group ({groups}), e.g. "
            "job.pattern='tok/s: (?P<tokens_per_s>[0-9.]+)'"
        )
    try:
        named = set(re.compile(job.pattern).groupindex)
    except re.error as exc:
        raise ConfigError(f"job.pattern={job.pattern!r} is not a regex ({exc}); fix it") from None
    if not named & set(REGEX_GROUPS):
        raise ConfigError(
            f"job.pattern={job.pattern!r} names no group the launcher reads; name one of {groups}, e.g. "
            "'tok/s: (?P<tokens_per_s>[0-9.]+)'"
        )


def _check_launch(job: JobConfig) -> None:
    program = os.path.basename(job.argv[0])
    module = job.argv[2] if len(job.argv) > 2 and job.argv[1] == "-m" else None
    if job.launch == "srun" and (program in _TORCHRUN or module in _TORCHRUN):
        started = " ".join(job.argv[:3] if module else job.argv[:1])
        raise ConfigError(
            f"job.launch=srun starts one task per rank, but job.argv starts {started!r}, which starts ranks itself; "
            "set job.launch=torchrun and drop torchrun from job.argv (or job.launch=none)"
        )


def _missing_script(argv: list[str]) -> str | None:
    """The script after `python` (argv[1]) when it does not exist here (relative: from this folder)."""
    if _PYTHONS.fullmatch(os.path.basename(argv[0])) and len(argv) > 1 and not argv[1].startswith("-"):
        script = argv[1]
        if "${" not in script and not Path(script).exists():
            return script
    return None


def refuse_missing_script(job: JobConfig) -> None:
    """cluster=local runs a command on this host, from this folder: a script after `python` that is not here
    cannot start in any trial, so it stops the sweep (one line) before anything is created. Slurm: a warning only
    (check_job), as the compute nodes may have it."""
    if job.kind == "command" and job.argv and (script := _missing_script(job.argv)) is not None:
        raise ConfigError(
            f"job.argv[1] {script!r} does not exist on this host, where cluster=local runs it from {os.getcwd()}; "
            "give the script's path from that folder, or an absolute one"
        )


def _warn_missing_program(argv: list[str], *, local: bool) -> None:
    """A warning line, not an error: the compute nodes may have what this host lacks. Locally, a missing script
    is refused before any trial (refuse_missing_script), so it is not warned of here."""
    program = argv[0]
    if _PYTHONS.fullmatch(os.path.basename(program)) and len(argv) > 1 and not argv[1].startswith("-"):
        if not local and (script := _missing_script(argv)) is not None:
            print(f"launcher: warning: job.argv[1] {script!r} does not exist on this host", file=sys.stderr)
        return
    if "${" not in program and shutil.which(program) is None and not Path(program).exists():
        print(f"launcher: warning: job.argv[0] {program!r} is not found on this host (PATH)", file=sys.stderr)
