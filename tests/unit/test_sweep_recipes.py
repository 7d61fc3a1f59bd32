"""A sweep keeps the user's recipe folder it was composed from (sweep.json `recipes`), so `launcher plan
--from` composes the measured recipe again without `--recipes`; a folder since removed is one line."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from launcher.config.compose import PACKAGED_RECIPES, user_recipes
from launcher.config.errors import ConfigError
from launcher.perf.plan import sweep_recipes
from launcher.run.sweep import prepare_sweep

REPO = Path(__file__).resolve().parents[2]
EXAMPLE = REPO / "examples" / "ddp_meter" / "recipes"


def test_the_users_folder_is_kept_resolved_and_the_bundled_one_is_not(monkeypatch):
    monkeypatch.delenv("LAUNCHER_RECIPES", raising=False)
    assert user_recipes(None) is None
    assert user_recipes(str(PACKAGED_RECIPES)) is None
    assert user_recipes(str(EXAMPLE / ".." / "recipes")) == str(EXAMPLE.resolve())
    monkeypatch.setenv("LAUNCHER_RECIPES", str(EXAMPLE))
    assert user_recipes(None) == str(EXAMPLE.resolve())


def test_prepare_sweep_carries_the_folder(monkeypatch):
    monkeypatch.delenv("LAUNCHER_RECIPES", raising=False)
    assert prepare_sweep(["sweep.world_sizes=[1]"]).recipes is None
    assert prepare_sweep(["sweep.world_sizes=[1]"], str(EXAMPLE)).recipes == str(EXAMPLE.resolve())


def _sweep(tmp_path: Path, recipes: str | None) -> Path:
    (tmp_path / "sweep.json").write_text(json.dumps({"config": {}, "trials": [], "overrides": [], "recipes": recipes}))
    return tmp_path


def test_plan_from_uses_the_stored_folder_unless_given(tmp_path):
    sweep = _sweep(tmp_path, str(EXAMPLE))
    assert sweep_recipes(sweep, None) == str(EXAMPLE)
    assert sweep_recipes(sweep, "elsewhere") == "elsewhere"
    assert sweep_recipes(_sweep(tmp_path, None), None) is None


def test_a_stored_folder_since_removed_is_one_line(tmp_path):
    gone = str(tmp_path / "gone")
    with pytest.raises(ConfigError) as err:
        sweep_recipes(_sweep(tmp_path, gone), None)
    assert str(err.value) == (
        f"--from {str(tmp_path)!r} was composed from the recipe folder {gone!r}, which is gone; "
        "pass --recipes DIR with the recipes it used"
    )
