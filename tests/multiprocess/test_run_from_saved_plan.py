"""`launcher run --from plan.json` on real local processes: `plan --search` saves its best
candidate beside the table, and the run started from that file trains that candidate (size,
layout, batch split, the plan's overrides) to completion."""

from __future__ import annotations

import contextlib
import io

import pytest

from launcher.cli import main
from launcher.io import read_json


@pytest.mark.torch_dist
def test_run_from_a_saved_search_plan_trains_its_best_candidate(tmp_path):
    recipe = ["model=tiny_gpt", "cluster=local", "cluster.peak_flops_per_device=5e10", "batch.micro=2"]
    with contextlib.redirect_stdout(io.StringIO()):
        rc = main(["plan", "--search", *recipe, "--gpus", "1,2", "--output", str(tmp_path / "plan.csv")])
    assert rc == 0
    plan = read_json(tmp_path / "plan.json")
    rec = plan["recommended"]
    user = ["run.steps=4", "run.warmup_steps=1", f"sweep.results_dir={tmp_path / 'runs'}", "--quiet"]
    err = io.StringIO()
    with contextlib.redirect_stdout(io.StringIO()) as out, contextlib.redirect_stderr(err):
        rc = main(["run", "--from", str(tmp_path / "plan.json"), *user])
    assert rc == 0, out.getvalue() + err.getvalue()
    said = err.getvalue().splitlines()
    assert said[0].startswith(f"from {tmp_path / 'plan.json'}: the plan recommends {plan['reason']}")
    assert f"  {' '.join(rec['overrides'])}   (the recommended candidate)" in said
    assert f"  run.world_size={rec['gpus']}   (the recommended size)" in said
    (run_dir,) = (tmp_path / "runs").iterdir()
    (trial_dir,) = (run_dir / "trials").iterdir()
    record = read_json(trial_dir / "record.json")
    trial, config = record["trial"], record["config"]
    assert record["status"] == "completed" and record["metrics"]["tokens_per_s"] > 0
    # what trained is the plan's choice: its size and layout degrees, batch split, checkpointing
    assert {k: trial[k] for k in ("world_size", "layout", "dp", "tp", "pp", "accum", "global_batch")} == {
        "world_size": rec["gpus"],
        **{k: rec[k] for k in ("layout", "dp", "tp", "pp", "accum", "global_batch")},
    }
    assert trial["micro"] == rec["micro_batch"] * rec["microbatches"]
    assert config["model"]["activation_checkpointing"] == rec["activation_checkpointing"]
    # and the plan's own overrides: its model, cluster and peak
    assert (config["model"]["name"], config["cluster"]["name"], config["cluster"]["peak_flops_per_device"]) == (
        "tiny_gpt",
        "local",
        5e10,
    )
    assert read_json(run_dir / "sweep.json")["overrides"] == [
        *plan["overrides"],
        *rec["overrides"],
        f"run.world_size={rec['gpus']}",
        *user[:-1],
    ]
