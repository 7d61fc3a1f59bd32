"""Issue 30 item 11: the repeats of one size go as one job array (`--array=0-N%K`), so a 4-size × 64-repeat sweep is
4 submissions, not 256; sweep.array_throttle (K) keeps sizes submitted together running side by side. Where jobs run
one at a time (cluster.serialize_trials) no throttle can interleave sizes, so there each round stays its own job."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from launcher.cli import main
from launcher.config.compose import compose_config
from launcher.slurm.submit import MAX_ARRAY_TASKS, group_trials, job_requests
from launcher.trials.spec import sweep_trials

SITE = ["cluster=slurm", "cluster.partition=gpu", "cluster.python=/opt/venv/bin/python"]


def _jobs(tmp_path, *overrides, variants=("",)):
    cfg = compose_config([*SITE, *overrides])
    trials = []
    for v in variants:
        trials += sweep_trials(cfg, first_index=len(trials), variant=v)
    return job_requests(cfg, tmp_path, trials)


def test_four_sizes_of_64_repeats_are_four_throttled_arrays(tmp_path):
    jobs = _jobs(tmp_path, "sweep.nodes=[1,2,3,4]", "sweep.repeats=64")
    assert [j.name for j in jobs] == ["job-000", "job-001", "job-002", "job-003"]
    assert [j.request.nodes for j in jobs] == [1, 2, 3, 4]
    for job in jobs:
        assert [t.repeat for t in job.trials] == list(range(64))
        assert job.request.array and job.request.array_throttle == 4
        lines = job.script.splitlines()
        assert [ln for ln in lines if ln.startswith("#SBATCH --array")] == ["#SBATCH --array=0-63%4"]
        assert "--dependency" not in job.script and "slurm-%A_%a.out" in job.script
        # Task i runs repeat i: the script's trial folders are in repeat order.
        (dirs,) = [ln for ln in lines if ln.startswith("TRIAL_DIRS=(")]
        assert dirs.split()[1:-1] == [str(tmp_path.resolve() / "trials" / t.trial_id) for t in job.trials]


def test_the_throttle_is_written_only_where_it_binds(tmp_path):
    (unthrottled,) = _jobs(tmp_path, "sweep.nodes=[2]", "sweep.repeats=64", "sweep.array_throttle=0")
    assert "#SBATCH --array=0-63\n" in unthrottled.script and unthrottled.request.array_throttle is None
    (few,) = _jobs(tmp_path, "sweep.nodes=[2]", "sweep.repeats=3")  # 3 repeats under the default 4: all at once
    assert "#SBATCH --array=0-2\n" in few.script
    (one,) = _jobs(tmp_path, "sweep.nodes=[2]", "sweep.repeats=5", "sweep.array_throttle=1")
    assert "#SBATCH --array=0-4%1\n" in one.script


def test_combinations_of_one_size_share_its_array_round_by_round(tmp_path):
    (job,) = _jobs(tmp_path, "sweep.nodes=[2]", "sweep.repeats=3", variants=("a", "b"))
    assert [t.trial_id for t in job.trials] == [
        "000-a-ws2-r0",
        "003-b-ws2-r0",
        "001-a-ws2-r1",
        "004-b-ws2-r1",
        "002-a-ws2-r2",
        "005-b-ws2-r2",
    ]
    assert "#SBATCH --array=0-5%4\n" in job.script


def test_serialized_jobs_keep_one_job_per_size_and_round(tmp_path):
    jobs = _jobs(tmp_path, "sweep.nodes=[1,2]", "sweep.repeats=3", "cluster.serialize_trials=true")
    assert [(j.request.nodes, [t.repeat for t in j.trials]) for j in jobs] == [
        (1, [0]),
        (2, [0]),
        (1, [1]),
        (2, [1]),
        (1, [2]),
        (2, [2]),
    ]
    assert all("--array" not in j.script and "#SBATCH --dependency=singleton\n" in j.script for j in jobs)


def _t(i, repeat, nodes=1):
    return SimpleNamespace(index=i, repeat=repeat, nodes=nodes, world_size=nodes)


def test_an_array_past_slurms_max_array_size_is_split():
    """Slurm's default MaxArraySize (1001) refuses an index over 1000: two combinations × 1000 repeats of one size
    are two arrays of 1000, each in round order."""
    trials = [_t(i, i % 1000) for i in range(1000)] + [_t(1000 + i, i) for i in range(1000)]
    groups = group_trials(trials, pack=False)
    assert [len(g) for g in groups] == [MAX_ARRAY_TASKS, MAX_ARRAY_TASKS] == [1000, 1000]
    assert [t.repeat for t in groups[0][:4]] == [0, 0, 1, 1] and [t.index for t in groups[0][:2]] == [0, 1000]
    assert [len(g) for g in group_trials(trials[:10], pack=False, by_round=True)] == [1] * 10
    assert group_trials(trials[:10], pack=True) == [trials[:10]]


def test_a_negative_throttle_is_one_line_exit_2(tmp_path, capsys):
    assert main(["sweep", *SITE, "sweep.array_throttle=-1", f"sweep.results_dir={tmp_path}"]) == 2
    err = capsys.readouterr().err
    assert err == "launcher: error: sweep.array_throttle=-1 must be at least 0; set e.g. sweep.array_throttle=4\n"
    assert not any(tmp_path.iterdir())


def test_a_submitted_array_is_one_line_not_64_ids(tmp_path):
    from launcher.run.executor.slurm import _holds  # the line `launcher sweep` prints per submitted job

    (job,) = _jobs(tmp_path, "sweep.nodes=[2]", "sweep.repeats=64")
    assert _holds(job) == "array of 64 (000-ws2-r0, 001-ws2-r1, …, 063-ws2-r63, 4 at a time)"
    (few,) = _jobs(tmp_path, "sweep.nodes=[2]", "sweep.repeats=3")
    assert _holds(few) == "000-ws2-r0, 001-ws2-r1, 002-ws2-r2"


def test_trial_files_are_written_durable_together(tmp_path, monkeypatch):
    """A sweep's trial.json files are made durable by one flush of their filesystem, not one fsync each (256 of
    them were most of submitting a 256-trial sweep); where syncfs is missing, each is fsync'd. Either way every
    file is whole and no temporary file is left."""
    import ctypes
    import json
    import os

    from launcher import io

    items = [(tmp_path / f"t{i}" / "trial.json", {"i": i}) for i in range(5)]
    fsyncs: list[int] = []
    monkeypatch.setattr(os, "fsync", lambda fd: fsyncs.append(fd))
    io.atomic_write_jsons(items)
    assert [json.loads(p.read_text()) for p, _ in items] == [{"i": i} for i in range(5)] and fsyncs == []
    monkeypatch.setattr(ctypes, "CDLL", lambda *a, **k: (_ for _ in ()).throw(OSError("no libc")))
    io.atomic_write_jsons([(p, {"again": True}) for p, _ in items])
    assert len(fsyncs) == 5 and json.loads(items[4][0].read_text()) == {"again": True}
    assert sorted(p.name for p in tmp_path.rglob("*") if p.is_file()) == ["trial.json"] * 5


def test_a_failed_batch_leaves_no_half_files(tmp_path):
    from launcher import io

    (tmp_path / "blocked").write_text("a file where a folder should be")
    items = [(tmp_path / "ok" / "trial.json", {"a": 1}), (tmp_path / "blocked" / "x" / "trial.json", {"b": 2})]
    with pytest.raises(OSError):
        io.atomic_write_jsons(items)
    assert list((tmp_path / "ok").iterdir()) == []  # its temporary file removed, nothing renamed into place


def test_trial_files_cost_only_their_disk_work(tmp_path, monkeypatch):
    """Each file of a batch is created with its final mode (0666 less the umask, as any new file: results are
    for the whole team) under a fixed temporary name: no mkstemp (random names, 0600) and no fchmod per file,
    ~60 ms of a 256-trial sweep's trial.json (issue 30 item 11). A temporary name a crashed writer left is never
    written through: that file gets a unique name instead, and the leftover stays as it was."""
    import os
    import tempfile

    from launcher import io

    calls: list[str] = []
    real_mkstemp, real_fchmod = tempfile.mkstemp, os.fchmod
    monkeypatch.setattr(os, "fchmod", lambda fd, mode: (calls.append("fchmod"), real_fchmod(fd, mode))[1])
    monkeypatch.setattr(tempfile, "mkstemp", lambda **kw: (calls.append("mkstemp"), real_mkstemp(**kw))[1])
    old = os.umask(0o027)
    try:
        io.atomic_write_texts([(tmp_path / f"t{i}" / "trial.json", f"{i}\n") for i in range(3)])
        (tmp_path / "t0" / f".trial.json.{os.getpid()}.tmp").write_text("a crashed writer's")
        io.atomic_write_texts([(tmp_path / "t0" / "trial.json", "again\n")])
    finally:
        os.umask(old)
    assert calls == ["mkstemp", "fchmod"]  # only for the name the leftover holds
    assert [(tmp_path / f"t{i}" / "trial.json").read_text() for i in range(3)] == ["again\n", "1\n", "2\n"]
    assert {(tmp_path / f"t{i}" / "trial.json").stat().st_mode & 0o777 for i in range(3)} == {0o640}
    assert (tmp_path / "t0" / f".trial.json.{os.getpid()}.tmp").read_text() == "a crashed writer's"
