"""`python -m launcher.train --trial trial.json --record record.json`: the job payload.

Rank 0 writes ONE record, atomically, before the ranks' closing barrier, so a rank that dies
after it cannot make a finished trial look lost. After that barrier the process leaves without
torch's teardown (train/dist.py `leave`): nothing is left to tear down, and gloo's teardown is
where a rank rarely aborted ("terminate called without an active exception") or hung.
"""

from __future__ import annotations

import argparse
import os
import platform
import sys
import time
import traceback
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist

from launcher import __version__
from launcher.config.schema import LauncherConfig
from launcher.io import atomic_write_json
from launcher.train import checkpoint as ckpt
from launcher.train import dist as tdist
from launcher.train import measure
from launcher.train.env import RankEnv, attempt, process_env
from launcher.train.loop import NonFiniteLoss, train
from launcher.trials.ends import mentions_oom
from launcher.trials.folder import from_document, read_document
from launcher.trials.spec import Trial

RECORD_SCHEMA_VERSION = 1


@dataclass(kw_only=True, frozen=True)
class Payload:
    """One rank's invocation: what the record of any ending is built from."""

    doc: dict[str, Any]
    """trial.json as read; the record repeats its trial and config."""
    trial: Trial
    """The trial spec from `doc`."""
    cfg: LauncherConfig
    """The resolved config from `doc`."""
    renv: RankEnv
    """This process's rank and world size (launcher/train/env.py)."""
    record: Path
    """Where rank 0 writes the record."""
    started: float
    """time.time() when the payload started."""

    def write(self, status: str, reason: str | None, **fields: Any) -> None:
        """Rank 0 writes the record (atomically); the other ranks write nothing."""
        if self.renv.rank == 0:
            atomic_write_json(
                self.record,
                make_record(
                    status=status,
                    reason=reason,
                    doc=self.doc,
                    started=self.started,
                    world_size=self.renv.world_size,
                    **fields,
                ),
            )


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    started = time.time()
    spec = read_document(args.trial)
    if not spec.ok:  # nothing to train: say which file and why, the executor records it
        print(f"launcher.train: {spec.reason}", file=sys.stderr, flush=True)
        return 2
    doc = spec.doc
    trial, cfg = from_document(doc)
    # Before anything slow: USR1 (Slurm's warning before the time limit) would otherwise kill the
    # rank at once. A checkpointing run saves and requeues on it; a sweep trial runs on to its end.
    flag = ckpt.StopFlag().install()
    payload = Payload(doc=doc, trial=trial, cfg=cfg, renv=process_env(os.environ), record=args.record, started=started)
    if trial.checkpoint and payload.renv.rank == 0:
        set_aside_earlier_record(args.record)
    torch.set_num_threads(cfg.cluster.threads_per_rank)
    return run(
        payload,
        save_params=args.save_params,
        checkpoint_dir=args.record.parent / "checkpoint" if trial.checkpoint else None,
        stop=flag if trial.checkpoint else None,
    )


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m launcher.train", description=__doc__)
    parser.add_argument("--trial", required=True, type=Path, help="trial.json written by the launcher")
    parser.add_argument("--record", required=True, type=Path, help="where rank 0 writes the record")
    parser.add_argument("--save-params", type=Path, help="rank 0 saves final parameters here (tests)")
    return parser.parse_args(argv)


def set_aside_earlier_record(record: Path) -> None:
    """A rerun of an interrupted run: the earlier attempt's record is history, not the result."""
    if record.exists():
        # The record there is the previous attempt's (a rerun of a local folder counts as attempt 0).
        earlier = max(attempt(os.environ) - 1, 0)
        record.replace(record.with_name(f"record.attempt{earlier}.json"))


def run(payload: Payload, *, save_params: Path | None, checkpoint_dir: Path | None, stop: ckpt.StopFlag | None) -> int:
    """Train, and leave the record of however it ended; returns the rank's exit status."""
    try:
        return train_and_record(payload, save_params=save_params, checkpoint_dir=checkpoint_dir, stop=stop)
    except ckpt.Preempted as exc:
        # Exit 0 on every rank (a non-zero exit makes srun kill the others); the marker asks for the requeue.
        print(f"launcher: {exc}", flush=True)
        if payload.renv.rank == 0:
            atomic_write_json(ckpt.requeue_marker(payload.record.parent), {"step": exc.step, "at": time.time()})
        return 0  # no teardown: tdist.leave
    except NonFiniteLoss as exc:
        # Every rank agreed on it at the same step: a clean, early end, not a crash.
        payload.write("nan", str(exc), stopped_at_step=exc.step)
        return 0  # no teardown: tdist.leave
    except Exception as exc:
        traceback.print_exc()
        if not payload.record.exists():  # a failure after the record was written does not undo it
            payload.write(*failure(exc))
        return 1


def train_and_record(
    payload: Payload, *, save_params: Path | None, checkpoint_dir: Path | None, stop: ckpt.StopFlag | None
) -> int:
    trial, cfg, renv = payload.trial, payload.cfg, payload.renv
    if renv.world_size != trial.world_size:
        raise RuntimeError(f"launched with {renv.world_size} ranks but the trial wants world_size={trial.world_size}")
    device = tdist.pick_device(cfg.cluster.device, renv.local_rank)
    backend = tdist.pick_backend(cfg.parallel.backend, device)
    tdist.init(renv, backend, device, cfg.cluster.pg_timeout_s)
    out = train(
        trial,
        cfg,
        renv,
        device,
        save_params=save_params,
        checkpoint_dir=checkpoint_dir,
        stop=stop,
        trace_dir=payload.record.parent,
    )  # sweep.profile's trace goes beside the record
    payload.write(
        "completed",
        None,
        nodes=len(set(out["hosts"])),
        device=str(device.type),
        device_name=measure.recorded_device_name(cfg, device),
        backend=backend,
        **out,
    )
    dist.barrier()  # the record is on disk before any rank leaves (tdist.leave: no teardown after this)
    return 0


def failure(exc: BaseException) -> tuple[str, str]:
    """(status, reason) of a trial that raised `exc` on rank 0."""
    first_line = str(exc).splitlines()[0][:200] if str(exc) else ""
    reason = f"rank 0 raised {type(exc).__name__}: {first_line}"
    if is_oom(exc):
        return "oom", f"out of memory (infeasible at this size and layout): {reason}"
    return "failed", reason


def is_oom(exc: BaseException) -> bool:
    return isinstance(exc, (torch.cuda.OutOfMemoryError, MemoryError)) or mentions_oom(str(exc))


def make_record(*, status: str, reason: str | None, doc: dict, started: float, **fields: Any) -> dict[str, Any]:
    return {
        "schema_version": RECORD_SCHEMA_VERSION,
        "status": status,
        "reason": reason,
        "trial": doc["trial"],
        "config": doc["config"],
        "versions": versions(),
        "started_at": started,
        "finished_at": time.time(),
        "wall_s": time.time() - started,
        **fields,
    }


def versions() -> dict[str, Any]:
    return {
        "launcher": __version__,
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "python": platform.python_version(),
        "executable": sys.executable,  # which interpreter ran: the image's, in a container
        "platform": platform.platform(),
    }


if __name__ == "__main__":
    sys.stdout.reconfigure(line_buffering=True)  # type: ignore[attr-defined]
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    tdist.leave(main())
