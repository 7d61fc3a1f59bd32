"""`launcher plan … --output FILE` saves the plan beside its table (FILE with .json), and `launcher run
--from` that plan starts its recommended candidate: real plans saved by the CLI, runs as dry runs
(the real local run is tests/multiprocess/test_run_from_saved_plan.py); every refusal is one exact line."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pandas as pd

from launcher.cli import main
from launcher.config.compose import compose_config
from launcher.io import read_json
from launcher.run.run_from import choose

LOCAL = ["model=tiny_gpt", "cluster=local", "cluster.peak_flops_per_device=5e10", "batch.micro=2"]
REASON = re.compile(
    r"2 GPUs: largest size with weak-scaling efficiency ≥ 0\.80 \(0\.99, 1\.9\d× the throughput of 1 GPU\)"
)
"""The plan's reason (its last digits move with the packaged fit's jitter at each refit)."""


def _plan(tmp_path: Path, argv: list[str], output: str = "plan.csv") -> Path:
    """Run `launcher plan` with --output under tmp_path; the saved plan's path."""
    assert main(["plan", *argv, "--output", str(tmp_path / output)]) in (0, 1)
    return (tmp_path / output).with_suffix(".json")


def _runs(tmp_path: Path) -> list[Path]:
    return sorted(p for p in (tmp_path / "runs").iterdir()) if (tmp_path / "runs").is_dir() else []


def test_a_search_plan_saves_its_recipe_cluster_and_best_candidate_beside_the_table(tmp_path, capsys):
    saved = _plan(tmp_path, ["--search", *LOCAL, "--gpus", "1,2"])
    out = capsys.readouterr().out
    assert f"every candidate written to {tmp_path / 'plan.csv'}\n" in out
    assert f"plan saved to {saved}: launcher run --from {saved} starts its recommended candidate\n" in out
    doc = read_json(saved)
    assert {k: doc[k] for k in ("format", "version", "saved_by", "table", "recipes", "overrides", "cluster")} == {
        "format": "launcher saved plan",
        "version": 1,
        "saved_by": "launcher plan --search",
        "table": "plan.csv",
        "recipes": None,
        "overrides": LOCAL,
        "cluster": {"name": "local", "device": "cpu"},
    }
    assert REASON.fullmatch(doc["reason"])
    rec = doc["recommended"]
    # the best candidate at the recommended size, as the table's top-ranked row of that size says
    table = pd.read_csv(tmp_path / "plan.csv")
    best = table[(table["gpus"] == 2) & (table["rank"] == 1)].iloc[0]
    assert rec["candidate"] == best["candidate"] == "ddp mb2×1 no-ckpt"
    assert rec["overrides"] == best["overrides"].split()
    assert {k: rec[k] for k in ("gpus", "status", "layout", "dp", "tp", "pp", "micro_batch", "accum")} == {
        "gpus": 2,
        "status": "predicted",
        "layout": "ddp",
        "dp": 2,
        "tp": 1,
        "pp": 1,
        "micro_batch": 2,
        "accum": 1,
    }
    assert rec["activation_checkpointing"] == "none" and rec["tokens_per_s"] == best["tokens_per_s"]


def test_run_from_a_search_plan_runs_its_best_candidate_and_says_what_and_why(tmp_path, capsys):
    saved = _plan(tmp_path, ["--search", *LOCAL, "--gpus", "1,2"])
    assert saved == tmp_path / "plan.json"
    capsys.readouterr()
    user = ["run.steps=8", f"sweep.results_dir={tmp_path / 'runs'}"]
    assert main(["run", "--from", str(saved), *user, "--dry-run"]) == 0
    out, err = capsys.readouterr()
    ranks = [ln.split()[1:3] for ln in out.splitlines() if ln.startswith("MASTER_ADDR=")]
    assert ranks == [["RANK=0", "WORLD_SIZE=2"], ["RANK=1", "WORLD_SIZE=2"]]
    tokens, reason = read_json(saved)["recommended"]["tokens_per_s"], read_json(saved)["reason"]
    assert REASON.fullmatch(reason)
    assert err.splitlines() == [
        f"from {saved}: the plan recommends {reason} (launcher plan --search: predicted, nothing measured)",
        f"  candidate: ddp mb2×1 no-ckpt, {tokens:,.0f} tokens/s predicted",
        "  model=tiny_gpt cluster=local cluster.peak_flops_per_device=5e10 batch.micro=2   (the plan's)",
        "  parallel=ddp batch.micro=2 batch.accum=1 model.activation_checkpointing=none   (the recommended candidate)",
        "  run.world_size=2   (the recommended size)",
        f"  run.steps=8 sweep.results_dir={tmp_path / 'runs'}   (yours, last: they win)",
    ]


def test_a_comma_plan_saves_the_recommended_combination_and_runs_from_its_table_path(tmp_path, capsys):
    saved = _plan(tmp_path, [*LOCAL, "parallel=ddp,fsdp", "--gpus", "1,2"], output="plan.parquet")
    assert saved == tmp_path / "plan.json"
    doc = read_json(saved)
    assert doc["saved_by"] == "launcher plan" and doc["table"] == "plan.parquet"
    assert doc["overrides"] == [*LOCAL, "parallel=ddp"]  # the recommended combination's, one value per key
    rec = doc["recommended"]
    assert (rec["variant"], rec["gpus"], rec["layout"], rec["dp"], rec["overrides"]) == ("ddp", 2, "ddp", 2, [])
    capsys.readouterr()
    # the table's path finds the plan saved beside it
    argv = ["run", "--from", str(tmp_path / "plan.parquet"), "run.steps=8", f"sweep.results_dir={tmp_path / 'runs'}"]
    assert main([*argv, "--dry-run"]) == 0
    out, err = capsys.readouterr()
    assert [ln.split()[1:3] for ln in out.splitlines() if ln.startswith("MASTER_ADDR=")] == [
        ["RANK=0", "WORLD_SIZE=2"],
        ["RANK=1", "WORLD_SIZE=2"],
    ]
    assert err.splitlines()[2:4] == [
        "  model=tiny_gpt cluster=local cluster.peak_flops_per_device=5e10 batch.micro=2 parallel=ddp   (the plan's)",
        "  run.world_size=2   (the recommended size)",
    ]


def test_a_slurm_search_plan_runs_its_nodes_requeued_in_the_dry_run_script(tmp_path, capsys):
    recipe = ["model=gpt_1_3b", "cluster=example_gpu_site", "sweep.name=ignored"]
    saved = _plan(tmp_path, ["--search", *recipe, "--gpus", "8..64"])
    rec = read_json(saved)["recommended"]
    capsys.readouterr()
    assert main(["run", "--from", str(saved), f"sweep.results_dir={tmp_path / 'runs'}", "--dry-run"]) == 0
    out, err = capsys.readouterr()
    (run_dir,) = _runs(tmp_path)
    nodes = rec["gpus"] // 8  # example_gpu_site: 8 GPUs per node
    assert f"#SBATCH --nodes={nodes}\n" in out and "#SBATCH --requeue\n" in out
    # the plan's overrides less its sweep.* settings, the candidate's, the nodes, requeue, the user's
    assert read_json(run_dir / "sweep.json")["overrides"] == [
        "model=gpt_1_3b",
        "cluster=example_gpu_site",
        *rec["overrides"],
        f"cluster.nodes={nodes}",
        "run.requeue=true",
        f"sweep.results_dir={tmp_path / 'runs'}",
    ]
    trial = read_json(next((run_dir / "trials").iterdir()) / "trial.json")["trial"]
    assert (trial["world_size"], trial["layout"], trial["dp"], trial["tp"], trial["pp"]) == (
        rec["gpus"],
        rec["layout"],
        rec["dp"],
        rec["tp"],
        rec["pp"],
    )
    assert "  run.requeue=true   (requeue and resume on Slurm's warning)" in err.splitlines()


def test_a_file_that_is_not_a_saved_plan_is_one_line_and_exit_2(tmp_path, capsys):
    other = tmp_path / "notes.json"
    other.write_text('{"hello": 1}\n')
    text = tmp_path / "notes.txt"
    text.write_text("not json\n")
    for path, said in (
        (other, 'is not a saved plan (no "format": "launcher saved plan")'),
        (text, "is not a saved plan (not JSON: Expecting value: line 1 column 1 (char 0))"),
    ):
        assert main(["run", "--from", str(path), f"sweep.results_dir={tmp_path / 'runs'}"]) == 2
        tail = (
            "; pass the .json that launcher plan … --output FILE saves beside FILE"
            if path == other
            else "; pass the .json launcher plan … --output saves"
        )
        assert capsys.readouterr() == ("", f"launcher: error: --from {str(path)!r} {said}{tail}\n")
    missing = tmp_path / "gone.json"
    assert main(["run", "--from", str(missing)]) == 2
    assert capsys.readouterr().err == (
        f"launcher: error: --from {str(missing)!r}: no such file; pass the .json that launcher plan … --output FILE "
        "saves beside FILE\n"
    )
    assert _runs(tmp_path) == []


def test_a_table_saved_without_a_plan_by_an_older_launcher_is_refused(tmp_path, capsys):
    table = tmp_path / "plan.csv"
    table.write_text("gpus,nodes,status,tokens_per_s\n8,1,predicted,1000\n")  # what --output wrote before
    assert main(["run", "--from", str(table), f"sweep.results_dir={tmp_path / 'runs'}"]) == 2
    assert capsys.readouterr() == (
        "",
        f"launcher: error: --from {str(table)!r} is a plan's table with no saved plan beside it (plan.json: it was "
        "written by a launcher that saved the table only); plan again with --output plan.csv to save it, then run "
        "--from plan.json\n",
    )
    assert _runs(tmp_path) == []


def test_a_recommended_candidate_that_is_predicted_oom_or_missing_is_refused(tmp_path, capsys):
    saved = _plan(tmp_path, ["--search", *LOCAL, "--gpus", "1,2"])
    doc = read_json(saved)
    doc["recommended"]["status"] = "oom (predicted)"
    saved.write_text(json.dumps(doc))
    capsys.readouterr()
    runs = f"sweep.results_dir={tmp_path / 'runs'}"
    assert main(["run", "--from", str(saved), runs]) == 2
    assert capsys.readouterr() == (
        "",
        f"launcher: error: --from {str(saved)!r}: the recommended candidate at 2 GPUs is 'oom (predicted)', not "
        "'predicted', so it would not run (over the memory limit); plan again (launcher plan --search chooses a "
        "candidate that fits)\n",
    )
    del doc["recommended"]["gpus"]
    saved.write_text(json.dumps(doc))
    assert main(["run", "--from", str(saved), runs]) == 2
    assert capsys.readouterr().err == (
        f'launcher: error: --from {str(saved)!r}: the recommended candidate has no size ("gpus": null); plan again\n'
    )
    assert _runs(tmp_path) == []


def test_a_plan_that_recommends_no_size_saves_why_and_run_from_it_says_so(tmp_path, capsys):
    recipe = ["model=llama3_70b", "parallel=ddp", "cluster=example_gpu_site", "--gpus", "8,16"]
    saved = _plan(tmp_path, recipe)
    out = capsys.readouterr().out
    assert f"plan saved to {saved} (it recommends no size, so launcher run --from {saved} has nothing to start)" in out
    doc = read_json(saved)
    assert doc["recommended"] is None and doc["reason"].startswith("every size is predicted out of memory: ")
    assert main(["run", "--from", str(saved), f"sweep.results_dir={tmp_path / 'runs'}"]) == 2
    assert capsys.readouterr() == (
        "",
        f"launcher: error: --from {str(saved)!r}: the plan recommends no size ({doc['reason']}); plan other sizes "
        "(--gpus) or another recipe, and run --from that plan\n",
    )
    assert _runs(tmp_path) == []


def test_output_never_overwrites_a_json_that_is_not_a_saved_plan(tmp_path, capsys):
    mine = tmp_path / "plan.json"
    mine.write_text('{"my": "notes"}\n')
    assert main(["plan", *LOCAL, "--gpus", "1,2", "--output", str(tmp_path / "plan.csv")]) == 2
    assert capsys.readouterr() == (
        "",
        f"launcher: error: --output {str(tmp_path / 'plan.csv')!r} saves the plan beside the table as "
        f"{str(mine)!r}, which exists and is not a saved plan; move it, or choose another --output\n",
    )
    assert mine.read_text() == '{"my": "notes"}\n' and sorted(p.name for p in tmp_path.iterdir()) == ["plan.json"]


def test_a_table_whose_plan_was_saved_with_another_table_is_refused(tmp_path, capsys):
    _plan(tmp_path, [*LOCAL, "--gpus", "1,2"], output="plan.csv")
    _plan(tmp_path, [*LOCAL, "--gpus", "1"], output="plan.parquet")  # plan.json now belongs to plan.parquet
    capsys.readouterr()
    assert main(["run", "--from", str(tmp_path / "plan.csv"), f"sweep.results_dir={tmp_path / 'runs'}"]) == 2
    assert capsys.readouterr().err == (
        f"launcher: error: --from {str(tmp_path / 'plan.csv')!r}: the plan beside it, plan.json, was saved with the "
        "table 'plan.parquet', not 'plan.csv'; pass --from plan.json to run that plan, or plan again with --output "
        "plan.csv\n"
    )


def test_overrides_after_from_a_plan_win(tmp_path, capsys):
    saved = _plan(tmp_path, ["--search", *LOCAL, "--gpus", "1,2"])
    user = ["run.world_size=1", "batch.micro=1", "run.steps=8"]
    chosen = choose(saved, user, None)
    cfg = compose_config(chosen.overrides)
    assert (cfg.run.world_size, cfg.batch.micro, cfg.batch.accum, cfg.parallel.layout) == (1, 1, 1, "ddp")
    assert chosen.lines[-1] == "  run.world_size=1 batch.micro=1 run.steps=8   (yours, last: they win)"
    capsys.readouterr()
    assert main(["run", "--from", str(saved), *user, f"sweep.results_dir={tmp_path / 'runs'}", "--dry-run"]) == 0
    out = capsys.readouterr().out
    assert [ln.split()[1:3] for ln in out.splitlines() if ln.startswith("MASTER_ADDR=")] == [["RANK=0", "WORLD_SIZE=1"]]
