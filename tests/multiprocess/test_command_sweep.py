"""job=command locally (issue 22): a user's own DDP program (gloo, CPU), swept at 1 and 2 ranks
through torchrun, each row's tokens/s equal to what the program printed of itself within 2%; the
srun-style launch (one process per rank); and the ends with reasons: a crash, an OOM on one rank,
and a clean exit that reported nothing."""

from __future__ import annotations

import json

import pytest

from launcher.cli import main
from tests.support.command_job import PROGRAM, argv, printed, table

pytestmark = pytest.mark.torch_dist

STEPS = ["sweep.steps=25", "sweep.warmup_steps=5", "cluster.trial_timeout_s=240"]


def _sweep(tmp_path, name: str, *overrides: str) -> int:
    return main(["sweep", "job=command", *STEPS, f"sweep.results_dir={tmp_path}", f"sweep.name={name}", *overrides])


# README's "Bring your training" recipe, the program being the test's: `launcher sweep --recipes my_recipes
# job=my_train sweep.world_sizes='[1,2]'`.
MY_TRAIN = (
    "defaults: [command]\n"
    f"argv: [python, {PROGRAM}, --micro, '${{batch.micro}}', --steps, '${{trial.steps}}', --warmup, "
    "'${trial.warmup_steps}']\n"
    "launch: torchrun\n"
    "metrics: meter\n"
)


@pytest.fixture(scope="module")
def torchrun_sweep(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("command")
    (tmp / "my_recipes" / "job").mkdir(parents=True)
    (tmp / "my_recipes" / "job" / "my_train.yaml").write_text(MY_TRAIN)
    args = ["sweep", "--recipes", str(tmp / "my_recipes"), "job=my_train", "sweep.world_sizes=[1,2]", *STEPS]
    assert main([*args, f"sweep.results_dir={tmp}", "sweep.name=cmd"]) == 0
    return tmp / "cmd"


def test_rows_equal_the_programs_own_figure(torchrun_sweep):
    rows = table(torchrun_sweep)
    assert rows["world_size"].tolist() == [1, 2]
    assert rows["status"].tolist() == ["completed", "completed"], rows["reason"].tolist()
    for trial_id, tokens_s in zip(rows["trial_id"], rows["tokens_per_s"], strict=True):
        assert tokens_s == pytest.approx(printed(torchrun_sweep / "trials" / trial_id), rel=0.02)
    assert rows["tokens_per_s_per_device"].tolist() == pytest.approx(
        (rows["tokens_per_s"] / rows["world_size"]).tolist()
    )
    assert rows["efficiency"].iloc[1] == pytest.approx(
        rows["tokens_per_s"].iloc[1] / (2 * rows["tokens_per_s"].iloc[0])
    )
    assert rows["step_time_median_s"].notna().all() and (rows["step_time_p10_s"] <= rows["step_time_p90_s"]).all()


def test_link_probe_gives_the_two_rank_row_busbw(torchrun_sweep):
    rows = table(torchrun_sweep)
    assert pd_isna(rows["busbw_gbps"].iloc[0]) and rows["busbw_gbps"].iloc[1] > 0
    record = json.loads((torchrun_sweep / "trials" / rows["trial_id"].iloc[1] / "record.json").read_text())
    assert record["metrics"]["allreduce_bytes"] == 64 * 2**20 and len(record["hosts"]) == 2
    # The one-rank trial's probe timed nothing but recorded its device and host (a GPU's name sets MFU's peak).
    one = json.loads((torchrun_sweep / "trials" / rows["trial_id"].iloc[0] / "record.json").read_text())
    assert one["device"] == "cpu" and len(one["hosts"]) == 1 and "allreduce_bytes" not in one["metrics"]


def pd_isna(value) -> bool:
    return value != value  # NaN


def test_srun_launch_runs_one_process_per_rank(tmp_path):
    assert _sweep(tmp_path, "srun", argv(), "job.launch=srun", "job.probe=false", "sweep.world_sizes=[2]") == 0
    rows = table(tmp_path / "srun")
    assert rows["status"].tolist() == ["completed"], rows["reason"].tolist()
    assert rows["tokens_per_s"].iloc[0] == pytest.approx(printed(tmp_path / "srun" / "trials" / "000-ws2"), rel=0.02)


@pytest.mark.parametrize(
    "fail, status, reason",
    [
        ("crash", "failed", "the command exited with code 1; rank 0 log ends: ValueError: boom on rank 0"),
        ("oom", "oom", "rank 1 log ends: RuntimeError: CUDA out of memory."),
        ("silent", "failed", "the command exited 0 but reported no throughput: "),
    ],
)
def test_ends_with_reasons(fail, status, reason, tmp_path):
    assert _sweep(tmp_path, fail, argv("--fail", fail), "job.probe=false", "sweep.world_sizes=[2]") == 1  # none ran
    rows = table(tmp_path / fail)
    assert rows["status"].tolist() == [status]
    assert reason in rows["reason"].iloc[0] and rows["reason"].iloc[0].count(reason) == 1


def test_a_program_of_its_own_step_count_shows_its_steps_and_a_summary_pattern_is_its_figure(tmp_path, capsys):
    """Issue 31 items 2 and 3, with a real program of 12 steps under sweep.steps=25. Its progress row reads the
    meter file's `step 12` (before: `12/25`, sweep.steps, from a `step k/N` line meant for the built-in trainer);
    a pattern matching its one summary line is that line's figure (before: 'run more steps', the one match counted
    as step 1, inside the 5 warm-up steps)."""
    meter = _sweep(
        tmp_path, "own", argv("--steps", "12"), "job.probe=false", "job.launch=srun", "sweep.world_sizes=[1]"
    )
    assert meter == 0
    row = next(ln for ln in capsys.readouterr().err.splitlines() if "000-ws1 (1 ranks)" in ln)
    assert " ".join(row.replace("━", " ").split()).startswith("000-ws1 (1 ranks) done step 12 0:00:")
    summary = "job.pattern='program tokens_per_s=(?P<tokens_per_s>[0-9.]+)'"
    once = _sweep(
        tmp_path,
        "summary",
        argv("--steps", "12"),
        "job.probe=false",
        "sweep.world_sizes=[1]",
        "job.metrics=regex",
        summary,
    )
    rows = table(tmp_path / "summary")
    assert once == 0 and rows["status"].tolist() == ["completed"], rows["reason"].tolist()
    assert rows["tokens_per_s"].iloc[0] == pytest.approx(printed(tmp_path / "summary" / "trials" / "000-ws1"), abs=1e-3)
