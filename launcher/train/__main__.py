"""`python -m launcher.train --trial trial.json --record record.json`: the job payload.

Rank 0 writes ONE record, atomically, before the process group is torn down, so a rank that
dies during teardown cannot make a finished trial look lost.
"""

from __future__ import annotations

import argparse
import os
import platform
import sys
import time
import traceback
from pathlib import Path
from typing import Any

from launcher import __version__
from launcher.trials.ends import mentions_oom
from launcher.io import atomic_write_json, read_json
from launcher.trials.spec import from_document

RECORD_SCHEMA_VERSION = 1


def versions() -> dict[str, Any]:
    import torch

    return {
        "launcher": __version__,
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "python": platform.python_version(),
        "platform": platform.platform(),
    }


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


def is_oom(exc: BaseException) -> bool:
    import torch

    return isinstance(exc, (torch.cuda.OutOfMemoryError, MemoryError)) or mentions_oom(str(exc))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m launcher.train", description=__doc__)
    parser.add_argument("--trial", required=True, type=Path, help="trial.json written by the launcher")
    parser.add_argument("--record", required=True, type=Path, help="where rank 0 writes the record")
    parser.add_argument("--save-params", type=Path, help="rank 0 saves final parameters here (tests)")
    args = parser.parse_args(argv)

    started = time.time()
    doc = read_json(args.trial)
    trial, cfg = from_document(doc)

    import torch
    import torch.distributed as dist

    from launcher.train import checkpoint as ckpt
    from launcher.train import dist as tdist
    from launcher.train.loop import NonFiniteLoss, train

    # Before anything slow: USR1 (Slurm's warning before the time limit) would otherwise kill the
    # rank at once. A checkpointing run saves and requeues on it; a sweep trial runs on to its end.
    flag = ckpt.StopFlag().install()
    stop = flag if trial.checkpoint else None
    checkpoint_dir = args.record.parent / "checkpoint" if trial.checkpoint else None
    if trial.checkpoint and args.record.exists() and os.environ.get("RANK", "0") == "0":
        # A rerun of an interrupted run: the earlier attempt's record is history, not the result.
        attempt = int(os.environ.get("SLURM_RESTART_COUNT", "1")) - 1
        args.record.replace(args.record.with_name(f"record.attempt{attempt}.json"))

    torch.set_num_threads(cfg.cluster.threads_per_rank)
    info = tdist.rank_info()
    rank0 = info.rank == 0
    try:
        if info.world_size != trial.world_size:
            raise RuntimeError(
                f"launched with {info.world_size} ranks but the trial wants world_size={trial.world_size}"
            )
        device = tdist.pick_device(cfg.cluster.device, info.local_rank)
        backend = tdist.pick_backend(cfg.parallel.backend, device)
        tdist.init(info, backend, device, cfg.cluster.pg_timeout_s)
        out = train(trial, cfg, info, device, save_params=args.save_params, checkpoint_dir=checkpoint_dir, stop=stop)
        if rank0:
            atomic_write_json(
                args.record,
                make_record(
                    status="completed",
                    reason=None,
                    doc=doc,
                    started=started,
                    world_size=info.world_size,
                    nodes=len(set(out["hosts"])),
                    device=str(device.type),
                    device_name=cfg.cluster.device_name,
                    backend=backend,
                    **out,
                ),
            )
        dist.barrier()
        dist.destroy_process_group()
        return 0
    except ckpt.Preempted as exc:
        print(f"launcher: {exc}", flush=True)
        if rank0:
            atomic_write_json(ckpt.requeue_marker(args.record.parent), {"step": exc.step, "at": time.time()})
        dist.destroy_process_group()
        return 0
    except NonFiniteLoss as exc:
        # Every rank agreed on it at the same step: a clean, early end, not a crash.
        if rank0:
            atomic_write_json(args.record, make_record(status="nan", reason=str(exc), doc=doc, started=started,
                                                       world_size=info.world_size, stopped_at_step=exc.step))  # fmt: skip
        dist.destroy_process_group()
        return 0
    except Exception as exc:
        traceback.print_exc()
        if rank0 and not args.record.exists():
            first_line = str(exc).splitlines()[0][:200] if str(exc) else ""
            status = "oom" if is_oom(exc) else "failed"
            reason = f"rank 0 raised {type(exc).__name__}: {first_line}"
            if status == "oom":
                reason = f"out of memory (infeasible at this size and layout): {reason}"
            atomic_write_json(
                args.record,
                make_record(status=status, reason=reason, doc=doc, started=started, world_size=info.world_size),
            )
        return 1


if __name__ == "__main__":
    sys.stdout.reconfigure(line_buffering=True)  # type: ignore[attr-defined]
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    sys.exit(main())
