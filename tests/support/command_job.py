"""The command-payload tests' sweeps (tests/multiprocess/test_command_sweep.py, tests/slurm/
test_command_slurm.py): tests/support/ddp_meter_prog.py swept as a user's own program
(`job=command`), and what each trial's program printed of its own throughput."""

from __future__ import annotations

import re
from pathlib import Path

import pandas as pd

PROGRAM = Path(__file__).with_name("ddp_meter_prog.py")
ARGV = (
    f"job.argv=[python,{PROGRAM},--micro,'${{batch.micro}}',--steps,'${{trial.steps}}',"
    "--warmup,'${trial.warmup_steps}'"
)
"""job.argv's override without its closing bracket: a test appends its own words (`--fail,oom`), then `]`."""
_PRINTED = re.compile(r"program tokens_per_s=([0-9.]+) world=(\d+)")


def argv(*extra: str) -> str:
    """The job.argv override, with `extra` words after the program's own."""
    return ARGV + "".join(f",{w}" for w in extra) + "]"


def printed(trial_dir: Path) -> float:
    """The program's own whole-job tokens/s, from rank 0's log (the latest attempt's on Slurm)."""
    logs = sorted(trial_dir.glob("rank0*.log"))
    found = _PRINTED.findall(logs[-1].read_text())
    assert found, f"{logs[-1]} holds no printed figure"
    return float(found[-1][0])


def table(sweep_dir: Path) -> pd.DataFrame:
    return pd.read_csv(sweep_dir / "results.csv")
