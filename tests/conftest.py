"""Shared fixtures. Real trials are expensive (each rank imports torch), so the end-to-end
sweep runs once per session and several tests read its folder."""

from __future__ import annotations

import contextlib
import io
import os
import tempfile
from pathlib import Path

import pytest

from launcher.cli import main

# pytest-xdist's workers run with COLUMNS=80 in their environment, which piped output honours
# (launcher/report/piped.py): the tests, and every subprocess they start, see output as a pipe
# without COLUMNS does, as a run under `-n 0` does; a test that wants a width sets COLUMNS itself.
os.environ.pop("COLUMNS", None)
# The composition cache (launcher/config/composed_cache.py) is the session's own, never the user's ~/.cache:
# every test, and every launcher it starts, composes from this session's recipes and code.
os.environ["LAUNCHER_CACHE_DIR"] = tempfile.mkdtemp(prefix="launcher-cache-")


def pytest_xdist_make_scheduler(config, log):
    """How pytest-xdist (`-n`, pyproject's addopts) shares the suite out: a file at a time, so that
    a file's module fixtures (a sweep several tests read) run once; every file under tests/slurm/
    on one worker, in turn, because those tests share the one dev cluster (a test that
    reconfigures or restarts it, or cuts a node's link, must not meet another's jobs); every file
    under tests/multiprocess/session/ (the readers of a session sweep: `default_sweep`,
    `repeated_sweep`) on one worker, so that sweep runs once. Everything else runs beside them:
    the Slurm tests spend much of their time waiting on the cluster, the others on CPU.
    (Groups by folder, not by marks: the controller collects nothing, and xdist's own
    `xdist_group` marks do not group under pytest 9.)"""
    from xdist.scheduler import LoadScopeScheduling  # lazy: only a distributed run needs it

    class ByShare(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            return share_of(nodeid.split("::")[0])

    return ByShare(config, log)


SHARED_FOLDERS = {"tests/slurm/": "slurm", "tests/multiprocess/session/": "session_sweeps"}
"""The folders whose files share one worker, and the name of that work unit."""


def share_of(path: str) -> str:
    """The work unit of a test file (its path from the repo root): its folder's, or the file itself."""
    return next((unit for folder, unit in SHARED_FOLDERS.items() if path.startswith(folder)), path)


@pytest.fixture(scope="session")
def default_sweep(tmp_path_factory) -> Path:
    """`launcher sweep` with ranks 1 and 2 on the embedded default, run once for the session."""
    out = tmp_path_factory.mktemp("results")
    assert main(["sweep", f"sweep.results_dir={out}", "sweep.name=e2e", "--quiet"]) == 0
    return out / "e2e"


@pytest.fixture(scope="session")
def parity_ref(tmp_path_factory):
    """The parity tests' 1-process reference (tests/support/layout_parity.py `reference()`: DDP, micro-batch 8,
    the built-in model): (per-step losses, final parameters), run once for the session. Every layout test
    that splits the same global batch reads it, rather than each file running the same reference again."""
    from tests.support.layout_parity import reference  # lazy: imports torch, which unit-only runs never need

    return reference(tmp_path_factory.mktemp("parity_ref"))


@pytest.fixture(scope="session")
def llama_parity_ref(tmp_path_factory):
    """The same reference with arch=llama (tests/unit/test_llama.py LLAMA, 4 layers under BASE), run once for the
    session: test_llama_parity's layouts and the context-parallel RoPE test compare with it."""
    from tests.support.layout_parity import reference  # lazy: imports torch, which unit-only runs never need
    from tests.unit.test_llama import LLAMA  # lazy: as above

    return reference(tmp_path_factory.mktemp("llama_parity_ref"), LLAMA)


@pytest.fixture(scope="session")
def devcluster():
    """The real Slurm dev cluster (`launcher cluster up`; idempotent, instant when already up)."""
    from launcher.slurm import devcluster as dc

    return dc.up(nodes=4, log=lambda line: None)


@pytest.fixture(scope="session")
def uninterrupted(tmp_path_factory):
    """The requeue tests' 2-rank run, locally and never interrupted (tests/support/uninterrupted.py): the
    final parameters a requeued run must match, run once for both files that requeue one."""
    from tests.support.uninterrupted import uninterrupted_params  # lazy: imports torch, which unit-only runs never need

    return uninterrupted_params(tmp_path_factory.mktemp("uninterrupted"))


@pytest.fixture(scope="session")
def repeated_sweep(tmp_path_factory) -> tuple[Path, str]:
    """`launcher sweep sweep.repeats=3` on ranks 1 and 2 (few steps), run once for the session:
    its folder and what it printed."""
    out = tmp_path_factory.mktemp("results")
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        assert (
            main(
                [
                    "sweep",
                    "sweep.repeats=3",
                    "sweep.world_sizes=[1,2]",
                    "sweep.steps=6",
                    "sweep.warmup_steps=2",
                    f"sweep.results_dir={out}",
                    "sweep.name=rep",
                    "--quiet",
                ]
            )
            == 0
        )
    return out / "rep", printed.getvalue()


@pytest.fixture
def one_mfu_presets(monkeypatch):
    """Presets with the fit file's one MFU per device, its matmul curves left out: for tests that pin
    the one-MFU plan's figures and phrases (the shape model's plan is tests/unit/test_shape_rate.py's),
    so they read the same before and after published_replay writes curves into preset_fit.json."""
    import dataclasses  # noqa: PLC0415 - only this fixture needs it

    from launcher.perf import preset_fit  # noqa: PLC0415 - as the plan's own import, lazily

    real = preset_fit.load
    fit = dataclasses.replace(real(), curves={})
    monkeypatch.setattr(
        preset_fit, "load", lambda path=preset_fit.PACKAGED: fit if path == preset_fit.PACKAGED else real(path)
    )
