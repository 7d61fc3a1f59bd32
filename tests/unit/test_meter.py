"""`launcher.meter`: the user's three-line change. One JSON line a step on global rank 0, in the file the
executor names; nothing anywhere else; no torch at import."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest

from launcher import meter

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture
def meter_file(tmp_path, monkeypatch) -> Path:
    path = tmp_path / "meter.jsonl"
    monkeypatch.setenv(meter.ENV_FILE, str(path))
    for var in meter._RANK_VARS:  # whatever launched pytest, this process is rank 0
        monkeypatch.delenv(var, raising=False)
    return path


def test_importing_meter_imports_no_torch():
    # a fresh interpreter: this one has torch loaded by other tests
    code = "import sys, launcher.meter; print(sorted(m for m in sys.modules if m.split('.')[0] == 'torch'))"
    done = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"


def test_rank_0_writes_one_line_a_step_with_the_contracts_fields(meter_file):
    before = time.time()
    meter.step(4096)
    meter.step(tokens=4096)
    meter.step(samples=8)
    after = time.time()
    lines = [json.loads(line) for line in meter_file.read_text().splitlines()]
    stamps = [line.pop("t") for line in lines]
    assert lines == [
        {"step": 1, "tokens": 4096, "samples": None},
        {"step": 2, "tokens": 4096, "samples": None},
        {"step": 3, "tokens": None, "samples": 8},
    ]
    assert before <= stamps[0] <= stamps[1] <= stamps[2] <= after


def test_each_line_is_on_disk_as_soon_as_the_step_returns(meter_file):
    # a killed job keeps every step it reported: read while the writer's file is still open
    meter.step(tokens=1)
    assert json.loads(meter_file.read_text())["step"] == 1


def test_a_rank_other_than_0_writes_nothing(meter_file, monkeypatch):
    monkeypatch.setenv("RANK", "1")
    meter.step(tokens=10)
    assert not meter_file.exists()


@pytest.mark.parametrize("var", ["SLURM_PROCID", "OMPI_COMM_WORLD_RANK", "PMI_RANK"])
def test_without_rank_a_launchers_own_rank_variable_decides(meter_file, monkeypatch, var):
    monkeypatch.setenv(var, "3")
    meter.step(tokens=10)
    assert not meter_file.exists()
    monkeypatch.setenv("RANK", "0")  # torchrun's RANK wins over the node's task id
    meter.step(tokens=10)
    assert len(meter_file.read_text().splitlines()) == 1


def test_rank_0_named_explicitly_writes(meter_file, monkeypatch):
    monkeypatch.setenv("RANK", "0")
    meter.step(tokens=10)
    assert len(meter_file.read_text().splitlines()) == 1


def test_without_the_meter_file_variable_it_is_a_no_op(tmp_path, monkeypatch):
    monkeypatch.delenv(meter.ENV_FILE, raising=False)
    for var in meter._RANK_VARS:  # whatever launched pytest, this process is rank 0
        monkeypatch.delenv(var, raising=False)
    monkeypatch.chdir(tmp_path)
    meter.step(tokens=10)
    assert list(tmp_path.iterdir()) == []


def test_a_new_file_starts_a_new_count(tmp_path, monkeypatch):
    for var in meter._RANK_VARS:  # whatever launched pytest, this process is rank 0
        monkeypatch.delenv(var, raising=False)
    for name in ("a.jsonl", "b.jsonl"):
        monkeypatch.setenv(meter.ENV_FILE, str(tmp_path / name))
        meter.step(tokens=1)
        meter.step(tokens=1)
    assert [json.loads(x)["step"] for x in (tmp_path / "b.jsonl").read_text().splitlines()] == [1, 2]
