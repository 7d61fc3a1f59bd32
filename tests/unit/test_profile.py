"""Seeing inside a trial: the reports' link to sweep.profile's torch.profiler trace, NVML's readings
of the GPUs (null with a reason where there is none), and the straggler rank named with its host.
Real traces: tests/multiprocess/test_profile_trace.py and session/test_profile_unprofiled.py."""

from __future__ import annotations

import html
import json
import sys
import threading
import time
from dataclasses import asdict
from pathlib import Path

import pandas as pd
import pytest
import torch

from launcher.report.markdown import write_report
from launcher.results.policy import Recommendation
from launcher.results.scaling import add_scaling
from launcher.results.table import COLUMNS, trial_row
from launcher.train import nvml, trace
from tests.support.report import write_test_report

TRACE = trace.trace_name(0)


def _reading(util: float | None, mem: int | None, power: float | None) -> nvml.Reading:
    return nvml.Reading(gpu_util_pct=util, memory_used_bytes=mem, power_w=power)


def test_summary_is_mean_and_max_and_names_what_the_gpu_does_not_report():
    s = nvml.summarize(
        [_reading(80.0, 2 * 2**30, None), _reading(100.0, 4 * 2**30, None), _reading(60.0, 3 * 2**30, None)]
    )
    assert (s.samples, s.gpu_util_pct_mean, s.gpu_util_pct_max) == (3, 80.0, 100.0)
    assert (s.memory_used_bytes_mean, s.memory_used_bytes_max) == (3 * 2**30, 4 * 2**30)
    assert (s.power_w_mean, s.power_w_max) == (None, None)
    assert s.reason == "NVML does not report power_w on this GPU"
    empty = nvml.summarize([])
    assert empty.samples == 0 and empty.reason == "no NVML reading fell in the timed window"
    assert all(getattr(empty, name) is None for name in nvml.FIGURES)


def _wait_for(condition, timeout_s: float = 10.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, "the sampler thread took no reading"
        time.sleep(0.002)


def test_sampler_keeps_only_the_readings_after_the_mark():
    """A fake NVML: the real one needs an NVIDIA GPU and driver, which CI's machine has not. The
    fake's readings say whether warm-up was over when they were taken (300 W) or not (1 W)."""
    phase = {"power": 1.0}
    calls = []

    def read() -> nvml.Reading:
        calls.append(phase["power"])
        return _reading(50.0 if phase["power"] > 1 else 5.0, 2**30, phase["power"])

    sampler = nvml.Sampler(read, interval_s=0.001).start()
    _wait_for(lambda: len(calls) >= 3)  # warm-up readings
    phase["power"] = 300.0
    sampler.mark()
    _wait_for(lambda: len(sampler.readings) >= 3 and sampler.readings[-1].power_w == 300.0)
    s = sampler.stop()
    assert not sampler._thread.is_alive()
    # A reading goes to the list current when it began (append is looked up before read runs).
    assert s.samples >= 3 and [r.power_w for r in sampler.readings] == [300.0] * s.samples
    assert s.power_w_max == 300.0 and s.gpu_util_pct_max == 50.0 and s.reason is None


def test_sampler_survives_a_failing_reading_and_says_so():
    """A fake NVML whose second reading fails (a GPU fallen off the bus): training goes on."""
    done = threading.Event()
    n = {"calls": 0}

    def read() -> nvml.Reading:
        n["calls"] += 1
        if n["calls"] > 1:
            done.set()
            raise RuntimeError("GPU is lost")
        return _reading(70.0, 2**30, 200.0)

    sampler = nvml.Sampler(read, interval_s=0.001).start()
    assert done.wait(10)
    s = sampler.stop()
    assert s.samples == 1 and s.gpu_util_pct_mean == 70.0
    assert s.reason == "NVML reading failed: RuntimeError: GPU is lost"


def test_ranks_merge_into_mean_of_means_and_max_of_maxes():
    a = nvml.summarize([_reading(90.0, 10, 300.0), _reading(70.0, 20, 400.0)])
    b = nvml.summarize([_reading(40.0, 30, 250.0)])
    merged = nvml.merge([asdict(a), asdict(b)])
    assert merged["gpu_util_pct_mean"] == pytest.approx((80.0 + 40.0) / 2) and merged["gpu_util_pct_max"] == 90.0
    assert merged["memory_used_bytes_max"] == 30 and merged["power_w_mean"] == pytest.approx((350.0 + 250.0) / 2)
    assert merged["power_w_max"] == 400.0 and merged["samples_per_rank"] == [2, 1] and merged["reason"] is None
    assert merged["interval_s"] == nvml.INTERVAL_S and merged["per_rank"] == [asdict(a), asdict(b)]
    partly = nvml.merge([asdict(a), asdict(nvml.unavailable("no NVIDIA driver (pynvml: NVMLError_LibraryNotFound)"))])
    assert partly["reason"] == "rank 1: no NVIDIA driver (pynvml: NVMLError_LibraryNotFound)"
    assert partly["gpu_util_pct_mean"] == 80.0


@pytest.mark.skipif(torch.cuda.is_available(), reason="a machine with an NVIDIA driver has figures, not a reason")
def test_no_driver_gives_null_figures_with_the_reason():
    """The real nvidia-ml-py (a dependency) on a machine without an NVIDIA driver."""
    assert nvml.reader_for("GPU-00000000-0000-0000-0000-000000000000") == (
        None,
        "no NVIDIA driver (pynvml: NVMLError_LibraryNotFound)",
    )


def test_missing_nvidia_ml_py_and_cpu_trials_give_null_figures_with_the_reason(monkeypatch):
    monkeypatch.setitem(sys.modules, "pynvml", None)  # what `import pynvml` meets where it is not installed
    assert nvml.reader_for("GPU-0") == (None, "nvidia-ml-py is not installed; pip install nvidia-ml-py")
    with nvml.sampling(torch.device("cpu")) as got:
        nvml.timed_window_starts()  # no sampler: nothing to mark, nothing raised
    (s,) = got
    assert s == nvml.unavailable("a cpu trial: NVML reads NVIDIA GPUs only")


TRIAL = {
    "trial_id": "002-ws4",
    "world_size": 4,
    "nodes": 2,
    "layout": "ddp",
    "dp": 4,
    "micro": 8,
    "accum": 1,
    "global_batch": 32,
    "scaling": "weak",
    "lr": 1e-3,
}


def test_straggler_flag_names_the_slowest_rank_and_its_host():
    record = {
        "status": "completed",
        "reason": None,
        "hosts": ["node-a", "node-a", "node-b", "node-b"],
        "metrics": {
            "tokens_per_s": 1000.0,
            "rank_spread": 0.25,
            "rank_step_time_median_s": [0.100, 0.101, 0.125, 0.102],
        },
    }
    assert trial_row(TRIAL, record, None)["flags"] == (
        "straggler: rank 2's median step (on host node-b) is 25% over the fastest rank's (rank_spread 0.25 > 0.10)"
    )


def _fake_sweep(folder: Path) -> pd.DataFrame:
    """Two trial folders as a GPU sweep leaves them: one profiled (with NVML figures), one not."""
    nvml_figures = {
        "gpu_util_pct_mean": 87.4,
        "gpu_util_pct_max": 99.0,
        "power_w_mean": 412.0,
        "power_w_max": 455.0,
        "memory_used_bytes_max": 61.25 * 2**30,
        "reason": None,
    }
    for trial_id, traced in (("000-ws1", True), ("001-ws2", False)):
        tdir = folder / "trials" / trial_id
        tdir.mkdir(parents=True)
        record = {"status": "completed", "device": "cuda", "metrics": {"nvml": nvml_figures}}
        if traced:
            record["profile"] = {"trace": TRACE, "rank": 0}
            (tdir / TRACE).write_text('{"traceEvents": []}')
        (tdir / "record.json").write_text(json.dumps(record))
    rows = [
        {
            "trial_id": t,
            "variant": None,
            "world_size": n,
            "repeat": 0,
            "status": "completed",
            "tokens_per_s": 6000.0 * n,
            "scaling": "weak",
            "reason": None,
        }
        for t, n in (("000-ws1", 1), ("001-ws2", 2))
    ]
    return add_scaling(pd.DataFrame(rows).reindex(columns=COLUMNS))


def test_reports_link_the_trace_and_show_the_gpu_figures(tmp_path):
    write_report(
        _fake_sweep(tmp_path),
        Recommendation(world_size=2, reason="a test"),
        sweep_id="t",
        summary="s",
        threshold=0.8,
        sweep_dir=tmp_path,
        has_price=False,
    )
    md, page = (tmp_path / "report.md").read_text(), html.unescape((tmp_path / "report.html").read_text())
    gpu = "GPU busy 87% (max 99%), 412 W (max 455 W), 61.2 GiB used at most"
    assert f"- `000-ws1`: [profiler trace](trials/000-ws1/{TRACE}) · {gpu}" in md.splitlines()
    assert f"- `001-ws2`: {gpu}" in md.splitlines()
    assert f'<li><code>000-ws1</code>: <a href="trials/000-ws1/{TRACE}">profiler trace</a> · {gpu}</li>' in page
    assert page.count("profiler trace</a>") == 1


def test_a_record_cannot_point_the_link_out_of_its_folder(tmp_path):
    df = _fake_sweep(tmp_path)
    record = tmp_path / "trials" / "000-ws1" / "record.json"
    doc = json.loads(record.read_text())
    record.write_text(json.dumps({**doc, "profile": {"trace": "../../report.md"}}))
    (tmp_path / "report.md").write_text("an earlier report")
    write_test_report(df, tmp_path, world_size=2)
    assert "profiler trace" not in (tmp_path / "report.md").read_text()
