"""The three-line change that lets `launcher` read the user's own training's throughput:

    from launcher import meter
    ...
    meter.step(tokens=global_batch_tokens)   # once per optimizer step

Each call appends one JSON line, `{"step": n, "t": time.time(), "tokens": n | null, "samples": n | null}`,
to the file named by `LAUNCHER_METER_FILE` (the executor sets it to the trial's meter.jsonl), flushed at
once so a killed job keeps what it wrote. Only global rank 0 writes (env `RANK` unset or "0"; without RANK,
SLURM_PROCID, OMPI_COMM_WORLD_RANK or PMI_RANK), so every rank may call it with no collective. Without
`LAUNCHER_METER_FILE` it does nothing: the program runs unchanged outside `launcher`. No torch and no other
launcher module is imported: the user's program pays one `time.time()` and one short write a step on rank 0,
and nothing elsewhere.
"""

from __future__ import annotations

import json
import os
import time
from typing import IO

ENV_FILE = "LAUNCHER_METER_FILE"

_path: str | None = None
_file: IO[str] | None = None
_count = 0


# Where a launcher other than torchrun (or launcher's srun launch, which sets RANK) names the global rank:
# a program whose argv starts its own ranks (`launch: none`) with srun or mpirun would otherwise write once a rank.
_RANK_VARS = ("RANK", "SLURM_PROCID", "OMPI_COMM_WORLD_RANK", "PMI_RANK")


def _rank() -> str:
    """This process's global rank as the environment names it; "0" where nothing does (one process)."""
    return next((os.environ[v] for v in _RANK_VARS if os.environ.get(v)), "0")


def _open() -> IO[str] | None:
    """The file to append to, opened once per path; None where this process does not write."""
    global _path, _file, _count
    if _rank() != "0":
        return None
    path = os.environ.get(ENV_FILE)
    if not path:
        return None
    if path != _path:
        # a new path (a test, or a program that re-points it) starts a new count in the new file
        if _file is not None:
            _file.close()
        _path, _file, _count = path, open(path, "a", encoding="utf-8"), 0
    return _file


def step(tokens: int | None = None, *, samples: int | None = None) -> None:
    """Record that one optimizer step ended now, having processed `tokens` (or `samples`) of the WHOLE
    job (the global batch, every rank's share together), not this rank's share."""
    global _count
    f = _open()
    if f is None:
        return
    _count += 1
    f.write(json.dumps({"step": _count, "t": time.time(), "tokens": tokens, "samples": samples}) + "\n")
    f.flush()
