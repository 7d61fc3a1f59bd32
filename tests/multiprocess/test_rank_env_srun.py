"""Rank discovery under a real plain-srun-style launch of the payload: only the real rank 0 acts
as rank 0 (sets the earlier record aside, once). The rules: tests/unit/test_rank_env.py."""

from __future__ import annotations

import dataclasses
import os
import random
import socket
import subprocess
import sys

import pytest

from launcher.config.compose import compose_config
from launcher.io import atomic_write_json, read_json
from launcher.trials.folder import trial_document
from launcher.trials.spec import make_trial


def slurm_port() -> int:
    """A free port in 20000..31999, the range the Slurm rule gives (the kernel hands out 32768+)."""
    for _ in range(100):
        port = random.randint(20000, 31999)
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
                return port
            except OSError:
                continue
    raise RuntimeError("no free port in 20000..31999")


@pytest.mark.torch_dist
def test_plain_srun_launch_sets_the_earlier_record_aside_once(tmp_path):
    """A requeued checkpointing trial, launched the way plain srun launches it: only SLURM_* say who is
    who, no RANK and no MASTER_*. The ranks meet at the address derived from the node list and
    job id, and only rank 0 sets the earlier attempt's record aside (before, both tasks took
    themselves for rank 0 and raced to rename it: the loser died on a missing file)."""
    cfg = compose_config(["optim=sgd", "seed=3"])
    trial = dataclasses.replace(make_trial(cfg, index=0, world_size=2, steps=3, warmup_steps=1), checkpoint=True)
    atomic_write_json(tmp_path / "trial.json", trial_document(trial, cfg))
    atomic_write_json(tmp_path / "record.json", {"status": "failed", "reason": "the killed attempt"})
    torchrun_vars = ("RANK", "LOCAL_RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT")
    job = {k: v for k, v in os.environ.items() if k not in torchrun_vars} | {
        "SLURM_JOB_ID": str(slurm_port() - 20000),
        "SLURM_NTASKS": "2",
        "SLURM_JOB_NODELIST": "localhost",
        "SLURM_RESTART_COUNT": "1",
        "OMP_NUM_THREADS": "1",
    }
    argv = [
        sys.executable,
        "-m",
        "launcher.train",
        "--trial",
        str(tmp_path / "trial.json"),
        "--record",
        str(tmp_path / "record.json"),
    ]

    def spawn(task: int) -> subprocess.Popen:
        with open(tmp_path / f"rank{task}.log", "wb") as log:
            env = job | {"SLURM_PROCID": str(task), "SLURM_LOCALID": str(task)}
            return subprocess.Popen(argv, env=env, stdout=log, stderr=subprocess.STDOUT)

    procs = [spawn(task) for task in range(2)]
    try:
        codes = [p.wait(timeout=300) for p in procs]
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
    assert codes == [0, 0], "\n".join((tmp_path / f"rank{t}.log").read_text()[-2000:] for t in range(2))
    assert read_json(tmp_path / "record.attempt0.json")["reason"] == "the killed attempt"
    record = read_json(tmp_path / "record.json")
    assert record["status"] == "completed" and record["world_size"] == 2 and len(record["hosts"]) == 2
