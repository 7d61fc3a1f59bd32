"""A sweep without sweep.profile (the session's default sweep) leaves no profiler trace, and its
report names none."""

from __future__ import annotations

import json

import pytest


@pytest.mark.torch_dist
def test_unprofiled_trials_leave_no_trace(default_sweep):
    """The session's default sweep (conftest.py), profile off as by default."""
    tdirs = list(default_sweep.glob("trials/*"))
    assert len(tdirs) == 2
    for tdir in tdirs:
        assert not list(tdir.glob("trace*")) and "profile" not in json.loads((tdir / "record.json").read_text())
    assert "profiler trace" not in (default_sweep / "report.md").read_text()
