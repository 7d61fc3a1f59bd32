"""Table rows from literal trial files, and failure reasons from literal rank exits."""

from __future__ import annotations

from launcher.results.table import corrupt_row, trial_row
from launcher.run.local import LocalOutcome, MemoryWatch, RankExit
from launcher.run.stopped import Terminated, cancelled_outcome
from launcher.trials import ends
from launcher.trials.folder import FileRead, TrialFiles

GIB = 1 << 30

TRIAL = {
    "trial_id": "001-ws2",
    "world_size": 2,
    "nodes": 1,
    "layout": "ddp",
    "dp": 2,
    "micro": 8,
    "accum": 1,
    "global_batch": 16,
    "scaling": "weak",
    "lr": 1e-3,
}
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
        "completed",
        None,
        1000.0,
        2.0,
        "n1",
    )


def test_no_record_is_a_failed_row_with_the_executor_reason():
    row = trial_row(TRIAL, None, {"reason": "rank 1 was killed by SIGKILL"})
    assert (row["status"], row["reason"], row["tokens_per_s"]) == (
        "failed",
        "no record written: rank 1 was killed by SIGKILL",
        None,
    )


def test_a_local_trial_stopped_by_ctrl_c_or_sigterm_is_cancelled_not_failed():
    for exc, how in ((KeyboardInterrupt(), "Ctrl-C"), (Terminated(), "SIGTERM")):
        row = trial_row(TRIAL, None, cancelled_outcome(exc))
        assert (row["status"], row["reason"]) == ("cancelled", f"cancelled by the user ({how}); its ranks were stopped")


def test_a_trial_with_no_files_yet_is_not_started_as_launcher_status_says():
    assert (trial_row(TRIAL, None, None)["status"], trial_row(TRIAL, None, None)["reason"]) == ("not started", None)


def test_no_record_though_every_rank_exited_0_says_so():
    outcome = {
        "executor": "local",
        "final": True,
        "reason": None,
        "ranks": [{"rank": 0, "returncode": 0}, {"rank": 1, "returncode": 0}],
    }
    row = trial_row(TRIAL, None, outcome)
    assert (row["status"], row["reason"]) == ("failed", "no record written, though all 2 rank(s) exited with code 0")
    row = trial_row(TRIAL, None, {"executor": "local", "reason": None})
    assert (row["status"], row["reason"]) == ("failed", "no record written, and the executor gave no reason")


def test_a_damaged_file_makes_a_corrupt_row_that_keeps_what_the_others_say():
    def read(name: str, doc=None, reason=None) -> FileRead:
        state = "ok" if doc is not None else "corrupt" if reason else "missing"
        return FileRead(name=name, state=state, doc=doc, reason=reason)

    files = TrialFiles(
        trial=read("trial.json", {"trial": TRIAL, "config": {}}),
        record=read("record.json", RECORD),
        outcome=read("outcome.json", reason="outcome.json is truncated (0 bytes)"),
        submission=read("submission.json"),
    )
    row = corrupt_row(TRIAL, files)
    assert (row["status"], row["reason"], row["tokens_per_s"]) == (
        "corrupt",
        "outcome.json is truncated (0 bytes); the record says completed",
        1000.0,
    )


def test_a_row_without_its_spec_has_no_size_and_no_crash():
    row = trial_row({"trial_id": "003-ws8"}, None, {"executor": "local", "reason": "killed", "wall_s": 5.0})
    assert (row["trial_id"], row["world_size"], row["device_hours"], row["ranks_per_node"]) == (
        "003-ws8",
        None,
        None,
        None,
    )


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


def test_a_predicted_oom_is_an_oom_row_with_the_estimate():
    reason = (
        "predicted: needs ~90.1 GiB per rank (params 5.3, grads 10.6, optimizer 10.6, activations 63.3, "
        "runtime 0.4 GiB) > 23.5 GiB (host memory 23.5 GiB (cluster.host_memory_gb))"
    )
    outcome = {"executor": "estimate", "status": "oom", "predicted": True, "final": True, "reason": reason}
    row = trial_row(TRIAL, None, outcome)
    assert (row["status"], row["reason"], row["tokens_per_s"], row["device_hours"]) == ("oom", reason, None, None)


def _killed(watch: MemoryWatch, rss: int = 11 * GIB) -> LocalOutcome:
    """Rank 1 SIGKILLed first, rank 0 stopped by the launcher; each last seen holding `rss`."""
    watch.last_rss = {0: rss, 1: rss}
    stopped = RankExit(rank=0, returncode=-15, stopped_by_launcher=True, exit_seq=1, last_rss_bytes=rss)
    return LocalOutcome(ranks=[stopped, RankExit(rank=1, returncode=-9, exit_seq=0, last_rss_bytes=rss)], memory=watch)


def test_a_rank_the_kernel_killed_at_the_memory_limit_is_oom_not_failed():
    out = _killed(MemoryWatch(oom_kills_before=0, oom_kills_after=0, limit_bytes=24 * GIB, total_bytes=24 * GIB))
    assert out.oom and out.culprit() == 1
    reason = out.reason()
    assert reason == (
        "rank 1 was killed by SIGKILL: out of memory: the kernel OOM killer (rank 1 last held 11.0 GiB; "
        "its ranks 22.0 GiB of a 24.0 GiB limit); the launcher stopped rank(s) 0"
    )
    row = trial_row(TRIAL, None, {"executor": "local", "final": True, "reason": reason, "oom": out.oom})
    assert (row["status"], row["reason"]) == ("oom", f"no record written: {reason}")


def test_the_cgroup_counting_an_oom_kill_is_enough():
    out = _killed(MemoryWatch(oom_kills_before=2, oom_kills_after=3, limit_bytes=64 * GIB), rss=GIB)
    assert out.oom and "memory cgroup oom_kill +1" in out.reason()


def test_a_sigkill_far_from_the_limit_stays_failed():
    """LAUNCHER_FAULT's kill, or anyone's `kill -9`: memory had room, the cgroup counted nothing."""
    out = _killed(
        MemoryWatch(
            oom_kills_before=0,
            oom_kills_after=0,
            limit_bytes=24 * GIB,
            total_bytes=24 * GIB,
            min_available_bytes=20 * GIB,
        ),
        rss=GIB // 2,
    )
    assert not out.oom
    assert out.reason() == "rank 1 was killed by SIGKILL; the launcher stopped rank(s) 0"
    row = trial_row(TRIAL, None, {"executor": "local", "final": True, "reason": out.reason(), "oom": out.oom})
    assert row["status"] == "failed"
    assert not _killed(MemoryWatch()).oom  # nothing known about memory: no claim either way


def test_the_memory_cgroup_is_read_for_v1_and_v2(tmp_path):
    v2 = tmp_path / "v2"
    (v2 / "job").mkdir(parents=True)
    (v2 / "job" / "memory.events").write_text("low 0\nhigh 0\nmax 4\noom 2\noom_kill 2\n")
    (v2 / "job" / "memory.max").write_text("8589934592\n")
    (tmp_path / "cg2").write_text("0::/job\n")
    dirs = ends.memory_cgroup_dirs(v2, tmp_path / "cg2")
    assert dirs == [v2 / "job", v2] and ends.oom_kill_count(dirs) == 2 and ends.memory_limit_bytes(dirs) == 8 * GIB
    v1 = tmp_path / "v1"
    (v1 / "memory" / "slice").mkdir(parents=True)
    (v1 / "memory" / "slice" / "memory.oom_control").write_text("oom_kill_disable 0\nunder_oom 0\noom_kill 5\n")
    (tmp_path / "cg1").write_text("9:cpu:/x\n4:memory:/slice\n")
    assert ends.oom_kill_count(ends.memory_cgroup_dirs(v1, tmp_path / "cg1")) == 5
    assert ends.oom_kill_count([tmp_path / "nowhere"]) is None


def test_ranks_found_ended_in_one_poll_put_a_signals_kill_before_a_peers_error_exit():
    """Rank 1 SIGKILLed, rank 0 then exited 1 on the reset connection, both seen in one poll (a busy
    2-core host): the reason names rank 1 first, not rank 0 by its place in the poll."""
    from launcher.run.local import LocalOutcome, _wait_all

    class Ended:
        def __init__(self, code: int) -> None:
            self.returncode = code

        def poll(self) -> int:
            return self.returncode

    outcome = LocalOutcome()
    outcome.ranks = _wait_all([Ended(1), Ended(-9), Ended(0)], outcome, start=0.0, timeout_s=60, on_poll=None)
    assert [r.exit_seq for r in outcome.ranks] == [1, 0, 2]
    assert outcome.reason() == "rank 1 was killed by SIGKILL; then rank 0 exited with code 1"
