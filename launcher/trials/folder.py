"""The trial folder's files, read and written in one place.

    results/<sweep-id>/sweep.json                     the plan: config and every trial
    results/<sweep-id>/trials/<trial-id>/trial.json   what the payload runs (written by the launcher)
                                         record.json  the payload's record (rank 0)
                                         outcome.json how the ranks exited (the executor)
                                         submission.json  the Slurm job that runs it

Every file is written atomically, so a damaged one means a full disk, a crash of the file
system or a hand edit. A read never raises and never answers a bare None: it gives the
document, or says the file is missing, or says it is corrupt and why, naming the file — so a
damaged trial becomes a row that says so instead of a traceback or a silently missing row.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from launcher.config.derived import derives_microbatches, pipeline_batch
from launcher.config.plain import from_dict, to_dict
from launcher.config.schema import LauncherConfig
from launcher.io import atomic_write_json, atomic_write_texts, json_text, replace_text
from launcher.trials.spec import Trial

SWEEP_FILE = "sweep.json"
TRIAL_FILE = "trial.json"
RECORD_FILE = "record.json"
OUTCOME_FILE = "outcome.json"
SUBMISSION_FILE = "submission.json"

# What a document must hold for its readers to use it: None if it does, else what is wrong.
Check = Callable[[dict[str, Any]], "str | None"]


@dataclass(kw_only=True, frozen=True)
class FileRead:
    """What one read of a JSON file found."""

    name: str
    """The file's name, e.g. `record.json`."""
    state: Literal["ok", "missing", "corrupt"]
    """`ok`: `doc` holds it; `missing`: no such file; `corrupt`: there, but unusable."""
    doc: dict[str, Any] | None = None
    """The document (a JSON object) when `ok`, else None."""
    reason: str | None = None
    """Why there is no document, naming the file (`record.json is truncated (0 bytes)`); None when ok."""

    @property
    def ok(self) -> bool:
        return self.state == "ok"

    @property
    def missing(self) -> bool:
        return self.state == "missing"

    @property
    def corrupt(self) -> bool:
        return self.state == "corrupt"


# The start of a number or of true/false/null that was cut off: `-`, `0.`, `1e+`, `fal`.
_CUT_NUMBER = re.compile(r"-?(?:\d+\.?\d*(?:[eE][+-]?\d*)?)?")


def _ran_out(text: str, exc: json.JSONDecodeError) -> bool:
    """The parser failed for want of more text (a cut-off file), not on a wrong character."""
    end = len(text.rstrip())
    if exc.pos >= end or exc.msg.startswith("Unterminated string"):
        return True
    start = exc.pos
    while start > 0 and text[start - 1] in "0123456789.eE+-":
        start -= 1  # back to where a number the parser took in part began
    tail = text[start:end]
    return any(w.startswith(tail) for w in ("true", "false", "null")) or bool(_CUT_NUMBER.fullmatch(tail))


def _parse_problem(text: str, exc: json.JSONDecodeError) -> str:
    """Truncated (the parser ran out of text) or corrupt, with the parser's own words."""
    size = len(text.encode("utf-8", errors="replace"))
    if not text.strip(" \t\r\n\x00"):
        nul = ", all NUL bytes" if text and not text.strip("\x00") else ""
        return f"is truncated ({size} bytes{nul})"
    if _ran_out(text, exc):
        return f"is truncated ({size} bytes): {exc}"
    return f"is corrupt: {exc}"


_JSON_KIND = {list: "array", str: "string", int: "number", float: "number", bool: "boolean", type(None): "null"}


def read_document(path: Path, check: Check | None = None) -> FileRead:
    """Read one JSON object: ok, missing, or corrupt with the reason (never raises for the file's sake)."""
    name = path.name
    try:
        text = path.read_bytes().decode("utf-8")
    except FileNotFoundError:
        return FileRead(name=name, state="missing", reason=f"{name} is missing")
    except UnicodeDecodeError as exc:
        return FileRead(
            name=name, state="corrupt", reason=f"{name} is corrupt: not UTF-8 text ({exc.reason} at byte {exc.start})"
        )
    except OSError as exc:  # a folder in its place, no permission, an I/O error: the file cannot serve
        return FileRead(name=name, state="corrupt", reason=f"{name} cannot be read: {exc.strerror or exc}")
    try:
        doc = json.loads(text)
    except json.JSONDecodeError as exc:
        return FileRead(name=name, state="corrupt", reason=f"{name} {_parse_problem(text, exc)}")
    except RecursionError:
        return FileRead(name=name, state="corrupt", reason=f"{name} is corrupt: nested too deeply to parse")
    if not isinstance(doc, dict):
        kind = _JSON_KIND.get(type(doc), type(doc).__name__)
        return FileRead(name=name, state="corrupt", reason=f"{name} is corrupt: holds a JSON {kind}, not an object")
    problem = check(doc) if check else None
    if problem:
        return FileRead(name=name, state="corrupt", reason=f"{name} is corrupt: {problem}")
    return FileRead(name=name, state="ok", doc=doc)


def _wrong_type(doc: dict[str, Any], key: str, kinds: tuple[type, ...], required: bool = True) -> str | None:
    if key not in doc:
        return f"no {key!r}" if required else None
    value = doc[key]
    if isinstance(value, kinds) and not isinstance(value, bool) or (value is None and not required):
        return None
    return f"{key!r} is {json.dumps(value)[:40]}, not {' or '.join(k.__name__ for k in kinds)}"


def _check_trial(doc: dict[str, Any]) -> str | None:
    spec = doc.get("trial")
    if not isinstance(spec, dict):
        return "no 'trial' object"
    return (
        _wrong_type(spec, "trial_id", (str,))
        or _wrong_type(spec, "world_size", (int,))
        or _wrong_type(spec, "nodes", (int,))
        or _wrong_type(doc, "config", (dict,))
    )


def _check_record(doc: dict[str, Any]) -> str | None:
    return (
        _wrong_type(doc, "status", (str,))
        or _wrong_type(doc, "metrics", (dict,), required=False)
        or _wrong_type(doc, "hosts", (list,), required=False)
        or _wrong_type(doc, "wall_s", (int, float), required=False)
    )


def _check_outcome(doc: dict[str, Any]) -> str | None:
    return (
        _wrong_type(doc, "reason", (str,), required=False)
        or _wrong_type(doc, "status", (str,), required=False)
        or _wrong_type(doc, "wall_s", (int, float), required=False)
    )


def _check_submission(doc: dict[str, Any]) -> str | None:
    return _wrong_type(doc, "job_id", (str,)) or _wrong_type(doc, "key", (str,))


def _check_sweep(doc: dict[str, Any]) -> str | None:
    return (
        _wrong_type(doc, "config", (dict,))
        or _wrong_type(doc, "trials", (list,))
        or _wrong_type(doc, "recipes", (str,), required=False)  # a sweep from before it was kept has none
    )


def trial_dir(sweep_dir: Path, trial_id: str) -> Path:
    return sweep_dir / "trials" / trial_id


def trial_dirs(sweep_dir: Path) -> list[Path]:
    """Every trial folder of the sweep, in trial-id order."""
    return sorted((sweep_dir / "trials").glob("*/"))


def missing_folder(trial_id: str) -> str:
    """The reason for a trial sweep.json plans whose folder is gone."""
    return f"trials/{trial_id}/ is missing (sweep.json plans it)"


def trial_document(trial: Trial, cfg: LauncherConfig) -> dict[str, Any]:
    """What the payload reads: the trial spec and the resolved config it belongs to, in the form
    the trial runs it (a pipeline's micro-batches derived from a fixed global batch: pipeline_batch)."""
    return _document(trial, to_dict(pipeline_batch(cfg, trial.dp)))


def _document(trial: Trial, config: dict[str, Any]) -> dict[str, Any]:
    return {"trial": trial.to_dict(), "config": config}


def from_document(doc: dict[str, Any]) -> tuple[Trial, LauncherConfig]:
    return Trial(**doc["trial"]), from_dict(doc["config"])


def write_trial(tdir: Path, trial: Trial, cfg: LauncherConfig) -> None:
    atomic_write_json(tdir / TRIAL_FILE, trial_document(trial, cfg))


def write_trials(
    sweep_dir: Path, items: Sequence[tuple[Trial, LauncherConfig]], then: Sequence[tuple[Path, str]] = ()
) -> None:
    """Every trial.json of a sweep, each distinct config converted once: OmegaConf's conversion
    costs ~50 ms a config, so per trial it was most of submitting a 256-trial sweep. Distinct by
    identity: the trials of one sweep variant share their config object (prepare_sweep); an equal
    copy is only converted again, never wrong. `then`: other files (path, text) made durable with them
    and renamed into place after them (the sweep's sweep.json)."""
    configs: dict[tuple[int, int], str] = {}
    texts = []
    for t, cfg in items:
        # A pipeline's micro-batches derived from a fixed global batch follow dp; otherwise dp changes nothing.
        key = (id(cfg), t.dp if derives_microbatches(cfg) else 0)
        if key not in configs:
            configs[key] = _nested(json_text(to_dict(pipeline_batch(cfg, t.dp))))
        texts.append((trial_dir(sweep_dir, t.trial_id) / TRIAL_FILE, _document_text(t, configs[key])))
    atomic_write_texts([*texts, *then])  # durable together: one flush, not one fsync per trial


def _nested(text: str) -> str:
    """json_text of a value, indented to sit one level down (JSON escapes newlines inside strings)."""
    return text.rstrip("\n").replace("\n", "\n  ")


def _document_text(trial: Trial, config_text: str) -> str:
    """json_text(_document(trial, config)) from the config's text, dumped once per distinct config
    (its encoding, per trial, was a third of a 256-trial sweep's folders): the keys in sorted order."""
    return f'{{\n  "config": {config_text},\n  "trial": {_nested(json_text(trial.to_dict()))}\n}}\n'


def write_outcome(tdir: Path, doc: dict[str, Any]) -> None:
    atomic_write_json(tdir / OUTCOME_FILE, doc)


def write_submission(tdir: Path, doc: dict[str, Any], *, durable: bool = True) -> None:
    """submission.json. `durable=False` skips the fsync: for a copy whose durable original is the
    job's record (jobs/<job>.submitted.json), where 256 fsyncs would cost more than the sbatch calls."""
    if durable:
        atomic_write_json(tdir / SUBMISSION_FILE, doc)
        return
    replace_text(tdir / SUBMISSION_FILE, json.dumps(doc, sort_keys=True) + "\n")  # one line: json's C encoder


def read_sweep_spec(sweep_dir: Path) -> FileRead:
    """sweep.json: the sweep's config and its planned trials."""
    return read_document(sweep_dir / SWEEP_FILE, _check_sweep)


def read_trial(tdir: Path) -> FileRead:
    """trial.json: `{"trial": <Trial fields>, "config": <resolved config>}`."""
    return read_document(tdir / TRIAL_FILE, _check_trial)


def read_record(tdir: Path) -> FileRead:
    """record.json: the payload's record (status, reason, metrics, …)."""
    return read_document(tdir / RECORD_FILE, _check_record)


def read_outcome(tdir: Path) -> FileRead:
    """outcome.json: how the executor saw the trial end."""
    return read_document(tdir / OUTCOME_FILE, _check_outcome)


def read_submission(tdir: Path) -> FileRead:
    """submission.json: the Slurm job (and array task) that runs the trial."""
    return read_document(tdir / SUBMISSION_FILE, _check_submission)


@dataclass(kw_only=True, frozen=True)
class TrialFiles:
    """One read of every file of a trial folder."""

    trial: FileRead
    """trial.json."""
    record: FileRead
    """record.json."""
    outcome: FileRead
    """outcome.json."""
    submission: FileRead
    """submission.json (missing for local trials)."""

    @property
    def problems(self) -> list[str]:
        """One reason per corrupt file, in the order trial, record, outcome, submission."""
        return [f.reason for f in (self.trial, self.record, self.outcome, self.submission) if f.corrupt and f.reason]


def read_folder(tdir: Path) -> TrialFiles:
    return TrialFiles(
        trial=read_trial(tdir), record=read_record(tdir), outcome=read_outcome(tdir), submission=read_submission(tdir)
    )


def is_done(sweep_dir: Path, trial: Trial) -> bool:
    """Finished for good: the payload wrote a record, or the executor saw a final end.

    A record that is there but damaged still counts: the payload writes it last, so the trial
    ran to its end, and running it again would replace the evidence (the row says `corrupt`).
    A damaged outcome.json does not: whether its end was final is unknown. A Slurm trial's record
    counts only once its job has ended: a job requeued (preempted, a node failed, `scontrol
    requeue`) runs the trial again, and until its next attempt's rank 0 starts, record.json is the
    killed attempt's (often `failed`), which that attempt then replaces."""
    tdir = trial_dir(sweep_dir, trial.trial_id)
    outcome = read_outcome(tdir)
    final = outcome.ok and bool((outcome.doc or {}).get("final"))
    if not read_record(tdir).missing:
        return final or read_submission(tdir).missing
    return final


def close_skipped(sweep_dir: Path, trial: Trial, reason: str) -> str | None:
    """Record a trial a search no longer needs as `skipped` (final) with `reason`. A finished trial is
    left alone, and so is one whose outcome is corrupt: it may have run, and writing over it would
    hide that. Returns why it was left as it is, for the caller's log (None when closed or done)."""
    if is_done(sweep_dir, trial):
        return None
    tdir = trial_dir(sweep_dir, trial.trial_id)
    outcome = read_outcome(tdir)
    if outcome.corrupt:
        return f"{trial.trial_id} left as it is: {outcome.reason}"
    write_outcome(tdir, {"executor": "search", "status": "skipped", "final": True, "reason": reason})
    return None
