"""Reads the meter file `launcher.meter.step` writes (`<trial dir>/meter.jsonl`, one JSON line a step)."""

from __future__ import annotations

import json
from pathlib import Path

from launcher.harvest.reported import Interval, no_throughput

FILE = "meter.jsonl"
METER_SOURCES = ("meter", "hf", "lightning")
"""The `job.metrics` choices read from this file (the callbacks of hf and lightning call launcher.meter)."""


def _lines(metrics: str, path: Path) -> list[dict]:
    """The file's records of the program's last run: a requeued or restarted job appends a new count from
    step 1, and its steps are what the trial measured. A torn last line (a killed job) is dropped."""
    if not path.is_file():
        raise no_throughput(metrics, f"{path} was not written; call launcher.meter.step(tokens=n) each optimizer step")
    text = path.read_text(encoding="utf-8").splitlines()
    records = []
    for i, line in enumerate(text):
        try:
            rec = json.loads(line)
        except json.JSONDecodeError:
            if i == len(text) - 1:
                break
            raise no_throughput(metrics, f"{path} line {i + 1} is not JSON: {line[:80]!r}") from None
        if rec.get("step") == 1:
            records = []
        records.append(rec)
    return records


def _tokens(metrics: str, rec: dict, tokens_per_sample: int | None) -> float:
    """The whole job's tokens of one step: given, or its samples × job.tokens_per_sample."""
    if rec.get("tokens") is not None:
        return float(rec["tokens"])
    if rec.get("samples") is None:
        raise no_throughput(metrics, f"step {rec.get('step')} gave neither tokens nor samples to meter.step")
    if tokens_per_sample is None:
        raise no_throughput(metrics, "meter.step(samples=n) needs job.tokens_per_sample to count tokens; set it")
    return float(rec["samples"]) * tokens_per_sample


def meter_intervals(metrics: str, trial_dir: Path, *, tokens_per_sample: int | None) -> list[Interval]:
    """One interval a step from step 2 on: step i took t_i − t_(i−1); step 1 has no start time, so it is never
    measured (it is warm-up in any case)."""
    records = _lines(metrics, Path(trial_dir) / FILE)
    out = []
    for before, rec in zip(records, records[1:]):
        seconds = float(rec["t"]) - float(before["t"])
        tokens = _tokens(metrics, rec, tokens_per_sample)
        rate = tokens / seconds if seconds > 0 else 0.0
        out.append(Interval(last_step=int(rec["step"]), steps=1, tokens_per_s=rate, seconds=seconds))
    return out
