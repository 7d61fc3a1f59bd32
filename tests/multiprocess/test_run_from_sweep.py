"""`launcher run --from results/<sweep-id>` on real local processes: a sweep of the default tiny
recipe at 1 and 2 ranks, then the long run at the size it recommends."""

from __future__ import annotations

import contextlib
import io

import pytest

from launcher.cli import main
from launcher.io import read_json


@pytest.mark.torch_dist
def test_run_from_a_sweep_runs_the_size_and_layout_it_recommends(tmp_path):
    # threshold 0.01: 2 ranks are the pick on any host, even a busy 2-core one (0.4-0.8 there)
    fast = ["sweep.steps=4", "sweep.warmup_steps=1"]
    sweep = ["sweep.world_sizes=[1,2]", *fast, "sweep.threshold=0.01", f"sweep.results_dir={tmp_path}", "sweep.name=s"]
    assert main(["sweep", *sweep, "--quiet"]) == 0
    err = io.StringIO()
    with contextlib.redirect_stdout(io.StringIO()) as out, contextlib.redirect_stderr(err):
        rc = main(["run", "--from", str(tmp_path / "s"), "run.steps=4", "run.warmup_steps=1", "--quiet"])
    assert rc == 0, out.getvalue() + err.getvalue()
    said = err.getvalue().splitlines()
    assert said[0].startswith(f"from {tmp_path / 's'}: the sweep recommends 2 ranks: largest size with ")
    assert f"  sweep.results_dir={tmp_path}   (the sweep's)" in said
    assert "  run.world_size=2   (the recommended size)" in said
    assert "  run.steps=4 run.warmup_steps=1   (yours, last: they win)" in said
    (run_dir,) = [p for p in tmp_path.iterdir() if p.name != "s"]
    record = read_json(run_dir / "trials" / "000-ws2" / "record.json")
    assert (record["status"], record["trial"]["world_size"], record["trial"]["layout"]) == ("completed", 2, "ddp")
    assert record["config"]["model"]["name"] == "tiny_gpt" and record["trial"]["steps"] == 4
    assert out.getvalue().startswith(
        f"run {run_dir.name}: completed — tiny_gpt, ddp, 2 ranks on 1 node (cluster local)\n"
    )
