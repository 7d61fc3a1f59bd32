"""Shared fixtures. Real trials are expensive (each rank imports torch), so the end-to-end
sweep runs once per session and several tests read its folder."""

from __future__ import annotations

from pathlib import Path

import pytest

from launcher.cli import main

REPO = Path(__file__).resolve().parents[1]


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
