"""`--recipes DIR`: a real local sweep of the user's model (from DIR) with a bundled layout. The
search path's rules: tests/unit/test_recipes_path.py."""

from __future__ import annotations

import csv

import pytest

from launcher.cli import main
from tests.unit.test_recipes_path import MY_GPT, recipe_folder


@pytest.mark.torch_dist
def test_a_local_sweep_of_the_users_model_with_a_bundled_layout(tmp_path):
    mine = recipe_folder(tmp_path, {"model/my_gpt.yaml": MY_GPT})
    argv = [
        "sweep",
        "--recipes",
        str(mine),
        "model=my_gpt",
        "parallel=fsdp",
        "sweep.world_sizes=[1,2]",
        "sweep.steps=4",
        "sweep.warmup_steps=1",
        f"sweep.results_dir={tmp_path / 'results'}",
        "sweep.name=mine",
        "--quiet",
    ]
    assert main(argv) == 0
    with open(tmp_path / "results" / "mine" / "results.csv") as f:
        rows = list(csv.DictReader(f))
    assert [(r["world_size"], r["status"]) for r in rows] == [("1", "completed"), ("2", "completed")]
