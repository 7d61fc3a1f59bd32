"""A sweep's trials whose estimated memory cannot fit (launcher/perf/memory.py): found before anything
runs, recorded as `oom` rows and never launched, unless `sweep.force_sizes` names their size."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from launcher.config.schema import LauncherConfig
from launcher.perf import memory
from launcher.trials.folder import trial_dir, write_outcome
from launcher.trials.spec import Trial


def predict_oom(items: Sequence[tuple[Trial, LauncherConfig]]) -> tuple[dict[str, str], dict[str, str]]:
    """(skipped, forced): trial id → the predicted-oom reason of each trial whose ranks cannot fit their
    memory, apart as `sweep.force_sizes` names its size (world size; node count with sweep.nodes) or not."""
    host = memory.host_memory_bytes()
    gpu_here = memory.local_gpu()
    skipped: dict[str, str] = {}
    forced: dict[str, str] = {}
    for t, tcfg in items:
        reason = memory.predicted_oom(tcfg, t, gpu=memory.runs_on_gpu(tcfg, gpu_here), host_bytes=host)
        size = t.nodes if tcfg.sweep.nodes else t.world_size
        if reason is not None:
            (forced if size in tcfg.sweep.force_sizes else skipped)[t.trial_id] = reason
    return skipped, forced


def record_predicted_oom(sweep_dir: Path, predicted: dict[str, str]) -> None:
    """Close each predicted trial as `oom` (final: no executor ever starts it)."""
    for trial_id, reason in predicted.items():
        write_outcome(
            trial_dir(sweep_dir, trial_id),
            {"executor": "estimate", "status": "oom", "predicted": True, "final": True, "reason": reason},
        )
