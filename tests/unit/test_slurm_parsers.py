"""Parsers of sbatch/squeue/sacct output, fed literal outputs captured from the dev cluster
(tests/data/slurm/, see its README for the command behind each file)."""

from __future__ import annotations

from pathlib import Path

import pytest

from launcher.slurm.commands import (
    SlurmError,
    combine,
    expand_array_id,
    parse_sacct,
    parse_sbatch_parsable,
    parse_squeue,
    states_from_sacct,
    states_from_squeue,
)

DATA = Path(__file__).parents[1] / "data" / "slurm"


def sacct(name: str):
    return states_from_sacct(parse_sacct((DATA / name).read_text()))


def test_sbatch_parsable_and_its_error():
    assert parse_sbatch_parsable((DATA / "sbatch_parsable.txt").read_text()) == "19"
    assert parse_sbatch_parsable("123;cluster\n") == "123"
    with pytest.raises(SlurmError, match="not a job id"):
        parse_sbatch_parsable((DATA / "sbatch_error_partition.txt").read_text())


def test_completed_two_node_job_with_batch_extern_and_srun_steps():
    rows = parse_sacct((DATA / "sacct_completed_2node.txt").read_text())
    assert [(r.job_id, r.state, r.is_step, r.nodelist) for r in rows] == [
        ("19", "COMPLETED", False, "n[1-2]"),
        ("19.batch", "COMPLETED", True, "n1"),
        ("19.extern", "COMPLETED", True, "n[1-2]"),
        ("19.0", "COMPLETED", True, "n[1-2]"),
    ]
    (job,) = sacct("sacct_completed_2node.txt").values()
    assert (job.key, job.status, job.source, job.terminal, job.reason()) == ("19", "completed", "sacct", True, None)
    assert [s[0] for s in job.steps] == ["19.batch", "19.extern", "19.0"]


def test_cancelled_by_uid_0():
    job = sacct("sacct_cancelled.txt")["32"]
    assert (job.slurm_state, job.detail, job.status) == ("CANCELLED", "by 0", "cancelled")
    assert job.reason() == "cancelled by uid 0 (scancel)"
    assert ("32.0", "CANCELLED", 0, 15) in job.steps


def test_timeout_failed_and_node_fail():
    assert (
        sacct("sacct_timeout.txt")["30"].reason("00:01:00") == "hit the job's time limit (cluster.time_limit=00:01:00)"
    )
    failed = sacct("sacct_failed_exit3.txt")["34"]
    assert (failed.status, failed.exit_code, failed.reason()) == ("failed", 3, "job FAILED with exit code 3")
    node = sacct("sacct_node_fail.txt")["55"]
    assert (node.status, node.nodelist) == ("node_fail", "n4")
    assert node.reason() == "a node failed (Slurm NODE_FAIL on n4)"
    assert ("55.0", "CANCELLED", 0, 0) in node.steps  # NODE_FAIL steps carry an empty ExitCode


def test_step_killed_while_the_job_completes():
    job = sacct("sacct_step_killed.txt")["33"]
    assert job.status == "completed"  # Slurm says COMPLETED: only the payload's record can tell
    assert ("33.0", "CANCELLED", 0, 9) in job.steps


def test_requeued_job_keeps_the_latest_attempt():
    rows = parse_sacct((DATA / "sacct_requeued.txt").read_text())
    assert [r.state for r in rows if not r.is_step] == ["REQUEUED", "COMPLETED"]
    job = sacct("sacct_requeued.txt")["31"]
    assert (job.slurm_state, job.nodelist, job.requeues) == ("COMPLETED", "n1", 1)


def test_a_requeued_job_waiting_to_run_again_says_so():
    # The first attempt's rows of the capture, then the second attempt still pending.
    text = (DATA / "sacct_requeued.txt").read_text().splitlines()[:3]
    text.append("31|31|requeue-me|PENDING|0:0|00:00:00|None assigned|Unknown|Unknown")
    job = states_from_sacct(parse_sacct("\n".join(text) + "\n"))["31"]
    assert (job.status, job.requeues, job.terminal) == ("requeued", 1, False)
    assert job.reason() == "requeued 1×, pending"


def test_array_elements_by_key():
    states = sacct("sacct_array_done.txt")
    assert sorted(states) == ["24_2", "24_3", "24_4"]
    assert {k: (v.status, v.nodelist) for k, v in states.items()} == {
        "24_2": ("completed", "n1"),
        "24_3": ("completed", "n1"),
        "24_4": ("completed", "n2"),
    }
    raw = {r.job_id: r.job_id_raw for r in parse_sacct((DATA / "sacct_array_done.txt").read_text())}
    assert (raw["24_2"], raw["24_4"]) == ("28", "24")


def test_pending_array_in_squeue_expands_to_its_elements():
    rows = parse_squeue((DATA / "squeue_array_pending.txt").read_text())
    assert [(r.job_id, r.state, r.reason, r.nodelist, r.name) for r in rows] == [
        ("24_[2-4]", "PENDING", "Resources", "", "array"),
        ("20", "RUNNING", "None", "n[1-4]", "filler"),
    ]
    states = states_from_squeue(rows)
    assert sorted(states) == ["20", "24_2", "24_3", "24_4"]
    assert (states["24_3"].status, states["24_3"].source, states["24_3"].reason()) == (
        "pending",
        "squeue",
        "pending (Resources)",
    )
    assert states["20"].reason() == "running"


def test_a_throttled_array_reads_each_task_and_why_the_rest_wait():
    """sweep.array_throttle's `%K`: every repeat's key has a state, those past the throttle say why they wait."""
    keys = [f"1336_{i}" for i in range(6)]
    live = states_from_squeue(parse_squeue((DATA / "squeue_array_throttled.txt").read_text()))
    acct = sacct("sacct_array_throttled.txt")
    both = combine(acct, live, keys)
    assert {k: (v.status, v.source, v.queue_reason) for k, v in both.items()} == {
        "1336_0": ("running", "squeue", None),
        "1336_1": ("running", "squeue", None),
        **{f"1336_{i}": ("pending", "squeue", "JobArrayTaskLimit") for i in range(2, 6)},
    }
    assert [s[0] for s in acct["1336_0"].steps] == ["1336_0.batch", "1336_0.extern"]
    assert sorted(acct) == keys  # sacct's folded `1336_[2-5%2]` row too


def test_status_says_what_the_throttle_wait_means():
    from launcher.run.status import queue_reason

    assert queue_reason("JobArrayTaskLimit", "1336_2") == (
        "Slurm's Reason: JobArrayTaskLimit (waits its turn: sweep.array_throttle caps how many repeats of a size "
        "run at once)"
    )


def test_held_and_dependent_jobs_say_why_they_wait_only_in_squeue():
    live = states_from_squeue(parse_squeue((DATA / "squeue_held.txt").read_text()))
    assert {k: (v.status, v.queue_reason) for k, v in live.items()} == {
        "223": ("pending", "JobHeldUser"),
        "224": ("pending", "Dependency"),
        "225_0": ("pending", "JobHeldUser"),
        "225_1": ("pending", "JobHeldUser"),
        "225_2": ("pending", "JobHeldUser"),
    }
    acct = sacct("sacct_pending.txt")  # the same jobs a moment later in sacct: PENDING, and no word on why
    assert sorted(acct) == ["223", "224", "225_0", "225_1", "225_2"]
    assert {(v.slurm_state, v.detail, v.queue_reason) for v in acct.values()} == {("PENDING", "", None)}


def test_combine_takes_squeues_reason_for_queued_jobs_and_saccts_word_on_ended_ones():
    live = states_from_squeue(parse_squeue((DATA / "squeue_held.txt").read_text()))
    pending, ended = sacct("sacct_pending.txt"), sacct("sacct_cancelled_pending.txt")
    keys = ["223", "225_1", "999"]
    both = combine(pending, live, keys)
    assert sorted(both) == ["223", "225_1"]  # a key neither knows is left out (the caller says "unknown")
    assert (both["225_1"].status, both["225_1"].source, both["225_1"].reason()) == (
        "pending",
        "squeue",
        "pending (JobHeldUser)",
    )
    gone = combine(ended, live, keys)  # cancelled while pending: sacct's terminal state wins over a stale squeue row
    assert {k: (v.status, v.source, v.reason()) for k, v in gone.items()} == {
        "223": ("cancelled", "sacct", "cancelled by uid 0 (scancel)"),
        "225_1": ("cancelled", "sacct", "cancelled by uid 0 (scancel)"),
    }
    assert combine({}, live, ["224"])["224"].queue_reason == "Dependency"  # sacct does not know it yet


def test_a_requeued_job_waiting_again_keeps_saccts_count_and_takes_squeues_reason():
    text = (DATA / "sacct_requeued.txt").read_text().splitlines()[:3]
    text.append("31|31|requeue-me|PENDING|0:0|00:00:00|None assigned|Unknown|Unknown")
    acct = states_from_sacct(parse_sacct("\n".join(text) + "\n"))
    live = states_from_squeue(parse_squeue("31|PENDING|BeginTime||requeue-me\n"))
    job = combine(acct, live, ["31"])["31"]
    assert (job.status, job.requeues, job.queue_reason, job.reason()) == (
        "requeued",
        1,
        "BeginTime",
        "requeued 1×, pending (BeginTime)",
    )


@pytest.mark.parametrize(
    "job_id, keys",
    [
        ("123", ["123"]),
        ("123_4", ["123_4"]),
        ("123_[2-4]", ["123_2", "123_3", "123_4"]),
        ("7_[1,3-4]", ["7_1", "7_3", "7_4"]),
        ("9_[0-5%2]", [f"9_{i}" for i in range(6)]),
    ],
)
def test_expand_array_id(job_id, keys):
    assert expand_array_id(job_id) == keys


def test_malformed_lines_are_errors_not_guesses():
    with pytest.raises(ValueError, match="expected 9"):
        parse_sacct("123|COMPLETED\n")
    with pytest.raises(ValueError, match="expected 5"):
        parse_squeue("123|RUNNING\n")


def test_the_first_task_srun_saw_fail_is_named_from_the_batch_log():
    """Captured from the dev cluster: rank 1 of a 2-node trial SIGKILLed; srun then stops rank 0 (143)."""
    from launcher.slurm.explain import first_task_error

    log = DATA / "batch_log_rank_killed.txt"
    assert first_task_error(log, Path("/scratch/sweep/trials/007-killrank-ws2")) == "task 1 on n4: Killed"
    # A trial with no lines of its own (in a pack: one that had not started) borrows none of another trial's.
    assert first_task_error(log, Path("/scratch/sweep/trials/other")) is None
    assert first_task_error(DATA / "missing.txt", Path("/x")) is None


# Slurm 22.05 `sacct --parsable2` for jobs whose memory cgroup killed a rank: the job itself
# OUT_OF_MEMORY (0:125), and a job that reads FAILED while its srun step ran out of memory.
SACCT_OOM = """\
61|61|lnch-big|OUT_OF_MEMORY|0:125|00:02:13|n1|2026-11-22T18:20:01|2026-11-22T18:22:14
61.batch|61.batch|batch|OUT_OF_MEMORY|0:125|00:02:13|n1|2026-11-22T18:20:01|2026-11-22T18:22:14
61.extern|61.extern|extern|COMPLETED|0:0|00:02:13|n1|2026-11-22T18:20:01|2026-11-22T18:22:14
61.0|61.0|python|OUT_OF_MEMORY|0:125|00:02:12|n1|2026-11-22T18:20:02|2026-11-22T18:22:14
62|62|lnch-big|FAILED|1:0|00:01:40|n[1-2]|2026-11-22T18:23:01|2026-11-22T18:24:41
62.batch|62.batch|batch|FAILED|1:0|00:01:40|n1|2026-11-22T18:23:01|2026-11-22T18:24:41
62.0|62.0|python|OUT_OF_MEMORY|0:125|00:01:39|n[1-2]|2026-11-22T18:23:02|2026-11-22T18:24:41
"""


def test_out_of_memory_is_oom_for_the_job_and_for_a_failed_job_whose_step_ran_out():
    jobs = states_from_sacct(parse_sacct(SACCT_OOM))
    oom, step = jobs["61"], jobs["62"]
    assert (oom.slurm_state, oom.status, oom.exit_code, oom.signal) == ("OUT_OF_MEMORY", "oom", 0, 125)
    assert oom.reason() == "out of memory (Slurm OUT_OF_MEMORY): a rank reached the job's memory limit"
    assert (step.slurm_state, step.status) == ("FAILED", "oom")
    assert step.reason() == "out of memory (Slurm OUT_OF_MEMORY in step 62.0): a rank reached the job's memory limit"
    assert states_from_sacct(parse_sacct((DATA / "sacct_failed_exit3.txt").read_text()))["34"].status == "failed"
