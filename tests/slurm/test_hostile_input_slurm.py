"""Hostile input on the real scheduler: every accepted hostile value's rendered sbatch script
passes the real `sbatch --test-only` (batched per module). The values, and the scripts they render
to, are tests/unit/test_hostile_input.py's."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import pytest

from tests.unit.test_hostile_input import ACCEPTED_IDS, rendered  # noqa: F401 (rendered: a fixture)

pytestmark = pytest.mark.slurm


@pytest.fixture(scope="module")
def test_only(rendered, devcluster) -> dict[str, tuple[bool, str]]:  # noqa: F811 (the imported fixture)
    """`sbatch --test-only` on every accepted script, in parallel (one batch per module)."""
    from launcher.slurm.commands import sbatch_test_only  # lazy: as in the module it came from

    env = devcluster.env()
    ok = [c for c in rendered.values() if c.rc == 0]
    with ThreadPoolExecutor(max_workers=8) as pool:
        said = pool.map(lambda c: sbatch_test_only(c.script_path, env), ok)
        return {c.id: s for c, s in zip(ok, said)}


@pytest.mark.parametrize("case_id", ACCEPTED_IDS)
def test_accepted_script_passes_sbatch_test_only(case_id, rendered, test_only):  # noqa: F811 (a fixture)
    assert rendered[case_id].rc == 0, rendered[case_id].err[-500:]
    ok, said = test_only[case_id]
    assert ok and "to start at" in said, said
