"""Shared fixtures. Real trials are expensive (each rank imports torch), so the end-to-end
sweep runs once per session and several tests read its folder."""

from __future__ import annotations

import contextlib
import io
from pathlib import Path

import pytest

from launcher.cli import main

REPO = Path(__file__).resolve().parents[1]
SESSION_SWEEPS = {"default_sweep", "repeated_sweep"}


def pytest_collection_modifyitems(config, items):
    """How pytest-xdist (`-n`, pyproject's addopts) shares the suite out: whole files, so that a
    file's module fixtures (a sweep several tests read) run once; every file holding a test marked
    `slurm` on one worker, in turn, because those tests share the one dev cluster (a test that
    reconfigures or restarts it, or cuts a node's link, must not meet another's jobs); every file
    reading a session sweep on one worker, so that sweep runs once. Everything else runs beside
    them: the Slurm tests spend much of their time waiting on the cluster, the others on CPU."""
    files: dict[str, set[str]] = {}
    for item in items:
        kinds = files.setdefault(item.nodeid.split("::")[0], set())
        if item.get_closest_marker("slurm"):
            kinds.add("slurm")
        if SESSION_SWEEPS & set(getattr(item, "fixturenames", ())):
            kinds.add("session_sweeps")
    for item in items:
        path = item.nodeid.split("::")[0]
        kinds = files[path]
        group = "slurm" if "slurm" in kinds else "session_sweeps" if "session_sweeps" in kinds else path
        item.add_marker(pytest.mark.xdist_group(group))


@pytest.fixture(scope="session")
def default_sweep(tmp_path_factory) -> Path:
    """`launcher sweep` with ranks 1 and 2 on the embedded default, run once for the session."""
    out = tmp_path_factory.mktemp("results")
    assert main(["sweep", f"sweep.results_dir={out}", "sweep.name=e2e", "--quiet"]) == 0
    return out / "e2e"


@pytest.fixture(scope="session")
def devcluster():
    """The real Slurm dev cluster (`launcher cluster up`; idempotent, instant when already up)."""
    from launcher.slurm import devcluster as dc

    return dc.up(nodes=4, log=lambda line: None)


@pytest.fixture(scope="session")
def repeated_sweep(tmp_path_factory) -> tuple[Path, str]:
    """`launcher sweep sweep.repeats=3` on ranks 1 and 2 (few steps), run once for the session:
    its folder and what it printed."""
    out = tmp_path_factory.mktemp("results")
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        assert main(["sweep", "sweep.repeats=3", "sweep.world_sizes=[1,2]", "sweep.steps=6", "sweep.warmup_steps=2",
                     f"sweep.results_dir={out}", "sweep.name=rep", "--quiet"]) == 0  # fmt: skip
    return out / "rep", printed.getvalue()
