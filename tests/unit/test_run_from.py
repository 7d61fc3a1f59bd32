"""`launcher run --from results/<sweep-id>`: the size and layout the sweep recommends, chosen from
literal result folders (real plans and trial.json files, records written as a payload would)."""

from __future__ import annotations

from pathlib import Path

from launcher.cli import main
from launcher.config.compose import compose_config
from launcher.io import atomic_write_json, read_json
from launcher.run.run_from import choose
from launcher.run.sweep import create_sweep_dir, prepare_sweep, prepare_variants

LAYOUTS = ["model=mlp", "parallel=ddp,fsdp", "sweep.world_sizes=[1,2]", "batch.micro=8"]
# tokens/s per (layout, ranks): ddp keeps 0.75 of 1 rank's at 2 ranks, fsdp 0.95, so fsdp at 2 is picked.
THR = {("ddp", 1): 1000.0, ("ddp", 2): 1500.0, ("fsdp", 1): 1000.0, ("fsdp", 2): 1900.0}


def _sweep(tmp_path: Path, overrides: list[str], thr_of=lambda t: THR[(t.variant, t.world_size)], plan=None) -> Path:
    """A sweep folder named `s` under tmp_path whose trials recorded `thr_of(trial)` tokens/s (None: failed);
    `plan`: a prepared sweep of its own (else `overrides`' own)."""
    over = [*overrides, f"sweep.results_dir={tmp_path}", "sweep.name=s"]
    plan = plan or prepare_sweep(over)
    sweep_dir = create_sweep_dir(plan.cfg, plan.items, over, recipes=plan.recipes)
    for t, _ in plan.items:
        tdir = sweep_dir / "trials" / t.trial_id
        config = read_json(tdir / "trial.json")["config"]
        thr, n = thr_of(t), t.world_size
        if thr is None:
            atomic_write_json(tdir / "record.json", {"status": "failed", "reason": "rank 0 raised", "config": config})
            continue
        metrics = {
            "tokens_per_s": thr,
            "tokens_per_s_per_device": thr / n,
            "samples_per_s": thr / 64,
            "step_time_median_s": t.global_batch * 64 / thr,
            "cpu_contention": 1.0,
            "machines": t.nodes,
        }
        atomic_write_json(tdir / "record.json", {"status": "completed", "metrics": metrics, "config": config})
    return sweep_dir


def _new_folders(tmp_path: Path) -> list[Path]:
    return sorted(p for p in tmp_path.iterdir() if p.name != "s")


def test_a_layout_sweep_chooses_its_recommended_layout_and_size(tmp_path):
    sweep_dir = _sweep(tmp_path, LAYOUTS)
    chosen = choose(sweep_dir, [], None)
    # the recommended combination's overrides, less the sweep's own settings (results_dir kept), then the size
    assert chosen.overrides == [
        "model=mlp",
        "batch.micro=8",
        f"sweep.results_dir={tmp_path}",
        "parallel=fsdp",
        "run.world_size=2",
    ]
    cfg = compose_config(chosen.overrides)
    assert (cfg.parallel.layout, cfg.run.world_size, cfg.model.name, cfg.batch.micro) == ("fsdp", 2, "mlp", 8)
    assert chosen.lines[0].startswith(
        f"from {sweep_dir}: the sweep recommends fsdp, 2 ranks: largest size with weak-scaling efficiency ≥ 0.80 (0.95,"
    )
    assert chosen.lines[1].startswith("  confidence: unknown — one trial per size")
    assert chosen.lines[2:] == [
        f"  model=mlp batch.micro=8 sweep.results_dir={tmp_path} parallel=fsdp   (the sweep's)",
        "  run.world_size=2   (the recommended size)",
    ]


def test_the_run_dry_run_prints_the_choice_and_the_chosen_ranks_and_runs_nothing(tmp_path, capsys):
    sweep_dir = _sweep(tmp_path, LAYOUTS)
    assert main(["run", "--from", str(sweep_dir), "--dry-run"]) == 0
    out, err = capsys.readouterr()
    ranks = [ln.split()[1:3] for ln in out.splitlines() if ln.startswith("MASTER_ADDR=")]
    assert ranks == [["RANK=0", "WORLD_SIZE=2"], ["RANK=1", "WORLD_SIZE=2"]]
    assert err.startswith(f"from {sweep_dir}: the sweep recommends fsdp, 2 ranks: ")
    assert "  run.world_size=2   (the recommended size)\n" in err
    assert _new_folders(tmp_path) == []


def test_overrides_after_from_win_over_the_sweeps(tmp_path, capsys):
    sweep_dir = _sweep(tmp_path, LAYOUTS)
    chosen = choose(sweep_dir, ["run.world_size=1", "batch.micro=4", "run.steps=7"], None)
    cfg = compose_config(chosen.overrides)
    assert (cfg.parallel.layout, cfg.run.world_size, cfg.batch.micro, cfg.run.steps) == ("fsdp", 1, 4, 7)
    assert chosen.lines[-1] == "  run.world_size=1 batch.micro=4 run.steps=7   (yours, last: they win)"
    assert main(["run", "--from", str(sweep_dir), "run.world_size=1", "--dry-run"]) == 0
    ranks = [ln.split()[1:3] for ln in capsys.readouterr().out.splitlines() if ln.startswith("MASTER_ADDR=")]
    assert ranks == [["RANK=0", "WORLD_SIZE=1"]]


def test_a_slurm_sweep_runs_its_recommended_nodes_requeued_in_the_dry_run_script(tmp_path, capsys):
    # 2 nodes hold 0.9 of 1 node's throughput per node: the largest size at ≥ 0.8
    sweep_dir = _sweep(
        tmp_path, ["cluster=devcluster", "sweep.nodes=[1,2]"], lambda t: 1000.0 * t.nodes * 0.9 ** (t.nodes - 1)
    )
    assert main(["run", "--from", str(sweep_dir), "run.steps=50", "--dry-run"]) == 0
    out, err = capsys.readouterr()
    (run_dir,) = _new_folders(tmp_path)
    assert out == (run_dir / "jobs" / "job-000.sbatch").read_text()
    assert "#SBATCH --nodes=2\n" in out and "#SBATCH --requeue\n" in out and "--no-requeue" not in out
    assert read_json(run_dir / "trials" / "000-ws2" / "trial.json")["trial"]["steps"] == 50
    assert err.splitlines()[:6] == [
        f"from {sweep_dir}: the sweep recommends 2 ranks: largest size with weak-scaling efficiency ≥ 0.80 "
        "(0.90, 1.80× the throughput of 1 rank)",
        "  confidence: unknown — one trial per size, so the spread is unknown; set sweep.repeats=3 (or auto) to "
        "measure it",
        f"  cluster=devcluster sweep.results_dir={tmp_path}   (the sweep's)",
        "  cluster.nodes=2   (the recommended size)",
        "  run.requeue=true   (requeue and resume on Slurm's warning)",
        "  run.steps=50   (yours, last: they win)",
    ]
    assert read_json(run_dir / "sweep.json")["overrides"] == [
        "cluster=devcluster",
        f"sweep.results_dir={tmp_path}",
        "cluster.nodes=2",
        "run.requeue=true",
        "run.steps=50",
    ]


def test_a_folder_that_is_not_a_sweep_is_one_line_and_exit_2(tmp_path, capsys):
    assert main(["run", "--from", str(tmp_path / "nope"), f"sweep.results_dir={tmp_path}"]) == 2
    out, err = capsys.readouterr()
    assert (out, err) == (
        "",
        f"launcher: error: --from: {str(tmp_path / 'nope')!r} is not a sweep folder (no sweep.json); "
        "pass results/<sweep-id>\n",
    )
    assert list(tmp_path.iterdir()) == []


def test_a_sweep_with_nothing_completed_recommends_nothing_to_run(tmp_path, capsys):
    sweep_dir = _sweep(tmp_path, ["sweep.world_sizes=[1,2]"], lambda t: None)
    before = sorted(p.relative_to(tmp_path) for p in tmp_path.rglob("*"))
    assert main(["run", "--from", str(sweep_dir)]) == 2
    out, err = capsys.readouterr()
    assert (out, err) == (
        "",
        f"launcher: error: --from {str(sweep_dir)!r}: the sweep recommends no size (no trial completed, so there "
        "is nothing to recommend); finish or rerun it (launcher sweep --resume, launcher collect), or give the "
        "size: launcher run run.world_size=N / cluster.nodes=N\n",
    )
    assert sorted(p.relative_to(tmp_path) for p in tmp_path.rglob("*")) == before  # nothing written, not even a table


def test_a_plan_verify_sweep_whose_candidates_are_not_in_its_overrides_is_refused(tmp_path, capsys):
    """`plan --verify` stores the shared overrides; each candidate's settings (c1, c2) are in trial.json only,
    so running the shared ones would silently drop the recommended candidate's layout."""
    base = ["model=mlp", "sweep.world_sizes=[2]", f"sweep.results_dir={tmp_path}", "sweep.name=s"]
    plan = prepare_variants([("c1", [*base, "parallel=ddp"]), ("c2", [*base, "parallel=fsdp"])])
    thr = {"c1": 1000.0, "c2": 1500.0}
    sweep_dir = _sweep(tmp_path, ["model=mlp", "sweep.world_sizes=[2]"], lambda t: thr[t.variant], plan=plan)
    assert main(["run", "--from", str(sweep_dir), "--dry-run"]) == 2
    out, err = capsys.readouterr()
    assert (out, err) == (
        "",
        f"launcher: error: --from {str(sweep_dir)!r}: the recommended combination 'c2' is not one of the overrides "
        "sweep.json stores (a `plan --verify` sweep keeps its candidates' settings in trial.json only); "
        "run the candidate with the overrides `plan --verify` printed for it\n",
    )
    assert _new_folders(tmp_path) == []


def test_a_slurm_layout_that_cannot_checkpoint_runs_without_requeue_and_says_so(tmp_path, capsys):
    sweep_dir = _sweep(tmp_path, ["cluster=devcluster", "parallel=pipeline", "sweep.nodes=[2]"], lambda t: 1000.0)
    assert main(["run", "--from", str(sweep_dir), "--dry-run"]) == 0
    out, err = capsys.readouterr()
    assert "#SBATCH --nodes=2\n" in out and "#SBATCH --no-requeue\n" in out
    assert err.splitlines()[1:4] == [
        f"  cluster=devcluster parallel=pipeline sweep.results_dir={tmp_path}   (the sweep's)",
        "  cluster.nodes=2   (the recommended size)",
        "  not requeued: parallel.layout=pipeline cannot be checkpointed yet",
    ]


def test_cfg_with_from_is_refused_rather_than_showing_a_config_that_would_not_run(tmp_path, capsys):
    sweep_dir = _sweep(tmp_path, LAYOUTS)
    for verb in ("run", "plan"):
        assert main([verb, "--from", str(sweep_dir), "--cfg"]) == 2
        assert capsys.readouterr() == (
            "",
            f"launcher: error: --cfg with --from {sweep_dir}: --cfg composes only the overrides given here, not "
            "the sweep's that --from reads; drop --cfg (launcher run --from … --dry-run prints what it would run "
            "and why)\n",
        )
