"""Table rows from literal trial files, and failure reasons from literal rank exits."""

from __future__ import annotations

from launcher.run.local import LocalOutcome, RankExit
from launcher.results.table import corrupt_row, trial_row
from launcher.trials.folder import FileRead, TrialFiles

TRIAL = {"trial_id": "001-ws2", "world_size": 2, "nodes": 1, "layout": "ddp", "dp": 2, "micro": 8, "accum": 1,
         "global_batch": 16, "scaling": "weak", "lr": 1e-3}  # fmt: skip
RECORD = {
    "status": "completed",
    "reason": None,
    "hosts": ["n1", "n1"],
    "nodes": 1,
    "metrics": {"tokens_per_s": 1000.0, "step_time_median_s": 0.1, "peak_memory_bytes": 2**21, "ccr": 0.1},
}


def test_completed_record_gives_a_completed_row():
    row = trial_row(TRIAL, RECORD, {"reason": None})
    assert (row["status"], row["reason"], row["tokens_per_s"], row["peak_memory_mb"], row["hosts"]) == (
        "completed", None, 1000.0, 2.0, "n1",
    )  # fmt: skip


def test_no_record_is_a_failed_row_with_the_executor_reason():
    row = trial_row(TRIAL, None, {"reason": "rank 1 was killed by SIGKILL"})
    assert (row["status"], row["reason"], row["tokens_per_s"]) == (
        "failed", "no record written: rank 1 was killed by SIGKILL", None,
    )  # fmt: skip


def test_no_record_though_every_rank_exited_0_says_so():
    outcome = {"executor": "local", "final": True, "reason": None, "ranks": [{"rank": 0, "returncode": 0},
                                                                             {"rank": 1, "returncode": 0}]}  # fmt: skip
    row = trial_row(TRIAL, None, outcome)
    assert (row["status"], row["reason"]) == ("failed", "no record written, though all 2 rank(s) exited with code 0")
    row = trial_row(TRIAL, None, {"executor": "local", "reason": None})
    assert (row["status"], row["reason"]) == ("failed", "no record written, and the executor gave no reason")


def test_a_damaged_file_makes_a_corrupt_row_that_keeps_what_the_others_say():
    def read(name: str, doc=None, reason=None) -> FileRead:
        state = "ok" if doc is not None else "corrupt" if reason else "missing"
        return FileRead(name=name, state=state, doc=doc, reason=reason)

    files = TrialFiles(trial=read("trial.json", {"trial": TRIAL, "config": {}}), record=read("record.json", RECORD),
                       outcome=read("outcome.json", reason="outcome.json is truncated (0 bytes)"),
                       submission=read("submission.json"))  # fmt: skip
    row = corrupt_row(TRIAL, files)
    assert (row["status"], row["reason"], row["tokens_per_s"]) == (
        "corrupt", "outcome.json is truncated (0 bytes); the record says completed", 1000.0,
    )  # fmt: skip


def test_a_row_without_its_spec_has_no_size_and_no_crash():
    row = trial_row({"trial_id": "003-ws8"}, None, {"executor": "local", "reason": "killed", "wall_s": 5.0})
    assert (row["trial_id"], row["world_size"], row["device_hours"], row["ranks_per_node"]) == ("003-ws8", None, None, None)


def test_record_written_then_rank_aborts_stays_completed_with_a_note():
    row = trial_row(TRIAL, RECORD, {"reason": "rank 1 was killed by SIGABRT"})
    assert row["status"] == "completed"
    assert row["reason"] == "record complete, but afterwards rank 1 was killed by SIGABRT"


def test_failed_record_puts_the_cause_first():
    record = {"status": "failed", "reason": "rank 0 raised RuntimeError: Connection closed by peer"}
    row = trial_row(TRIAL, record, {"reason": "rank 1 was killed by SIGKILL; then rank 0 exited with code 1"})
    assert row["reason"] == (
        "rank 1 was killed by SIGKILL; then rank 0 exited with code 1; "
        "rank 0 raised RuntimeError: Connection closed by peer"
    )


def test_exit_reasons_name_the_first_failure():
    out = LocalOutcome(ranks=[RankExit(rank=0, returncode=1, exit_seq=1), RankExit(rank=1, returncode=-9, exit_seq=0)])
    assert out.reason() == "rank 1 was killed by SIGKILL; then rank 0 exited with code 1"
    assert out.culprit() == 1
    out = LocalOutcome(
        ranks=[RankExit(rank=0, returncode=3, exit_seq=0), RankExit(rank=1, returncode=-15, stopped_by_launcher=True)]
    )
    assert out.reason() == "rank 0 exited with code 3; the launcher stopped rank(s) 1"
    assert LocalOutcome(ranks=[RankExit(rank=0, returncode=0)]).reason() is None
    timed = LocalOutcome(ranks=[RankExit(rank=0, returncode=-15, stopped_by_launcher=True)], timed_out=True, wall_s=61)
    assert timed.reason() == "timed out after 61 s (cluster.trial_timeout_s); all ranks stopped"
