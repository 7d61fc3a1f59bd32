"""The tests sit in the folder of their kind, which is what the xdist scheduler (tests/conftest.py)
and `-m` both go by: tests/unit/ launches nothing and needs no cluster (neither the `slurm` nor
the `torch_dist` mark), tests/slurm/ needs the dev cluster (every file marked `slurm` as a whole),
tests/multiprocess/ launches real ranks or sweeps as local processes, and its session/ folder
holds every reader of a session sweep (they share one worker, so each sweep runs once)."""

from __future__ import annotations

import ast
from pathlib import Path

from tests.conftest import share_of

TESTS = Path(__file__).resolve().parents[1]
KINDS = ("unit", "multiprocess", "slurm")


def _test_files(folder: str = "") -> list[Path]:
    return sorted((TESTS / folder).rglob("test_*.py"))


def _marks(path: Path) -> set[str]:
    """The marks a file names anywhere (`pytest.mark.NAME`), module-level or on a test."""
    tree = ast.parse(path.read_text())
    return {
        n.attr
        for n in ast.walk(tree)
        if isinstance(n, ast.Attribute) and isinstance(n.value, ast.Attribute) and n.value.attr == "mark"
    }


def _module_marks(path: Path) -> set[str]:
    """The marks of `pytestmark = pytest.mark.NAME` (or a list of them): every test in the file."""
    for node in ast.parse(path.read_text()).body:
        if isinstance(node, ast.Assign) and [t.id for t in node.targets if isinstance(t, ast.Name)] == ["pytestmark"]:
            return {n.attr for n in ast.walk(node.value) if isinstance(n, ast.Attribute) and n.attr != "mark"}
    return set()


def test_every_test_file_sits_in_the_folder_of_its_kind():
    stray = [str(p.relative_to(TESTS)) for p in _test_files() if p.relative_to(TESTS).parts[0] not in KINDS]
    assert stray == []


def test_unit_tests_carry_neither_the_slurm_nor_the_torch_dist_mark():
    marked = {str(p.relative_to(TESTS)): m for p in _test_files("unit") if (m := _marks(p) & {"slurm", "torch_dist"})}
    assert marked == {}


def test_every_slurm_file_is_marked_slurm_as_a_whole():
    unmarked = [str(p.relative_to(TESTS)) for p in _test_files("slurm") if "slurm" not in _module_marks(p)]
    assert _test_files("slurm") and unmarked == []


def test_the_session_sweeps_are_read_only_from_their_folder():
    readers = {
        str(p.relative_to(TESTS.parent))
        for p in _test_files()
        if {"default_sweep", "repeated_sweep"}
        & {a.arg for a in ast.walk(ast.parse(p.read_text())) if isinstance(a, ast.arg)}
    }
    assert readers and {share_of(r) for r in readers} == {"session_sweeps"}


def test_the_scheduler_groups_by_folder():
    assert share_of("tests/slurm/test_faults.py") == share_of("tests/slurm/test_cancel_slurm.py") == "slurm"
    assert share_of("tests/multiprocess/session/test_record.py") == "session_sweeps"
    assert share_of("tests/multiprocess/test_parity.py") == "tests/multiprocess/test_parity.py"
    assert share_of("tests/unit/test_config.py") == "tests/unit/test_config.py"
