"""`launcher sweep --detach` submits and leaves: it builds no table, so it must not pay for pandas,
pyarrow and matplotlib (a second of a 256-trial submission's start-up, issue 30 item 11;
benchmarks/slurm_submit.py measures it). Fails if run/sweep.py (or anything on the submission path)
imports pandas at module level again, as it did before run/tabulate.py held the table code; and if the
CLI loads the dev cluster's code (defining `launcher cluster`'s arguments) or the executor package loads
the local executor for a Slurm sweep, as both did before (~35 ms of start-up together), or anything loads
rich, which only a terminal or a followed sweep's progress needs (~40 ms: launcher/run/say.py). No
submission of plain recipes loads Hydra (config/plain_compose.py), and a second one of the same group
choices no OmegaConf either (its document is cached: config/composed_cache.py); fails if expand, messages
or compose imported Hydra, or load, messages, show or compose OmegaConf, at module level again."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

pytestmark = pytest.mark.slurm

PROBE = """
import json, runpy, sys
sys.argv = ["launcher", *sys.argv[1:]]
try:
    runpy.run_module("launcher", run_name="__main__")
except SystemExit as exit:
    code = exit.code
heavy = sorted(m for m in ("pandas", "pyarrow", "matplotlib", "numpy", "torch") if m in sys.modules)
unneeded = sorted(
    m
    for m in ("launcher.slurm.devcluster", "launcher.run.executor.local", "rich", "hydra", "omegaconf")
    if m in sys.modules
)
print(json.dumps({"code": code, "heavy": heavy, "unneeded": unneeded}))
"""


def test_a_detached_submission_loads_no_table_stack(devcluster, tmp_path):
    env = devcluster.env() | {"LAUNCHER_CACHE_DIR": str(tmp_path / "cache")}
    results = []
    for attempt in ("first", "second"):
        name = f"detach-imports-{attempt}-{tmp_path.name}"
        argv = [
            "sweep",
            "cluster=devcluster",
            "sweep.nodes=[1,2]",
            "sweep.repeats=2",
            "cluster.sbatch_extra=['--hold']",  # held, then cancelled: nothing runs
            "cluster.serialize_trials=false",
            f"sweep.results_dir={tmp_path}",
            f"sweep.name={name}",
            "--detach",
        ]
        try:
            out = subprocess.run(
                [sys.executable, "-c", PROBE, *argv], env=env, capture_output=True, text=True, check=True
            )
        finally:
            subprocess.run(["scancel", f"--name=lnch-{name}"], env=env, check=True)
        results.append(json.loads(out.stdout.strip().splitlines()[-1]))
        assert len(list((tmp_path / name / "jobs").glob("*.sbatch"))) == 2  # it did submit: one array per size
    # The first reads the recipe files (OmegaConf's YAML loader, no Hydra: config/plain_compose.py) into an
    # empty cache; the second reads the kept document back and builds the config without OmegaConf.
    assert results == [
        {"code": 0, "heavy": [], "unneeded": ["omegaconf"]},
        {"code": 0, "heavy": [], "unneeded": []},
    ], out.stderr[-2000:]
