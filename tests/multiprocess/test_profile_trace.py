"""sweep.profile in a real sweep: each trial's torch.profiler trace is written, loadable and holds
the training step's ops. The rest of seeing inside a trial: tests/unit/test_profile.py."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from launcher.cli import main
from tests.unit.test_profile import TRACE


@pytest.fixture(scope="module")
def profiled(tmp_path_factory) -> Path:
    """`launcher sweep sweep.profile=true` at 1 and 2 ranks, a few steps."""
    out = tmp_path_factory.mktemp("results")
    assert (
        main(
            [
                "sweep",
                "sweep.profile=true",
                "sweep.world_sizes=[1,2]",
                "sweep.steps=4",
                "sweep.warmup_steps=1",
                f"sweep.results_dir={out}",
                "sweep.name=prof",
                "--quiet",
            ]
        )
        == 0
    )
    return out / "prof"


@pytest.mark.torch_dist
def test_profiled_trials_leave_a_trace_of_the_training_step(profiled):
    for n in (1, 2):
        (tdir,) = profiled.glob(f"trials/*-ws{n}")
        record = json.loads((tdir / "record.json").read_text())
        assert record["profile"] == {
            "trace": TRACE,
            "rank": 0,
            "steps": [5, 6],
            "activities": ["cpu"],
            "after_timed_steps": True,
        }
        # The traced steps come after the timed ones: these are the 4 − 1 timed steps alone.
        assert record["metrics"]["steps_measured"] == 3 and len(record["metrics"]["losses"]) == 4
        assert sorted(p.name for p in tdir.glob("trace-*")) == [TRACE]  # rank 0 alone records
        events = json.loads((tdir / TRACE).read_text())["traceEvents"]
        names = {e.get("name", "") for e in events}
        assert {"aten::mm", "aten::addmm"} & names, "no matmul in the trace"
        assert any(name.startswith("Optimizer.step#") for name in names), "no optimizer step in the trace"
        assert {name for name in names if name.startswith("ProfilerStep#")} == {"ProfilerStep#1", "ProfilerStep#2"}
        assert any("backward" in name.lower() for name in names), "no backward pass in the trace"
        nv = record["metrics"]["nvml"]
        assert nv["reason"] == "a cpu trial: NVML reads NVIDIA GPUs only" and nv["samples_per_rank"] == [0] * n
    md = (profiled / "report.md").read_text()
    linked = sorted(line.split("(", 1)[1].split(")")[0] for line in md.splitlines() if "[profiler trace]" in line)
    assert linked == [f"trials/000-ws1/{TRACE}", f"trials/001-ws2/{TRACE}"]
    assert all((profiled / link).is_file() for link in linked)
    assert (profiled / "report.html").read_text().count("profiler trace</a>") == 2
