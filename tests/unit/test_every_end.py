"""Every end's right reason (issue 30 item 6), from batch logs, sacct and trial files captured on the dev cluster
(tests/data/slurm/ends/, see its README): under torchrun srun's `task N` is node N's agent, not rank N; a packed
trial's end is its own lines in the shared batch log, not the job's step i (a command trial adds a probe step)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from launcher.results.table import trial_row
from launcher.slurm.commands import parse_sacct, states_from_sacct
from launcher.slurm.explain import first_task_error, status_and_reason
from launcher.trials.ends import meaningful_line

ENDS = Path(__file__).parents[1] / "data" / "slurm" / "ends"
OOM = "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB"


def captured(tmp_path: Path, case: str, job: str, trials: dict[str, str]) -> Path:
    """The captured case laid out as the sweep folder it came from (trial id → its files' folder in the case),
    the batch log's trial paths pointing there as they pointed at the captured sweep's."""
    sweep = (tmp_path / "sweep").resolve()
    (sweep / "jobs").mkdir(parents=True)
    for trial_id, folder in trials.items():
        files = ENDS / case / folder
        shutil.copytree(files, sweep / "trials" / trial_id, ignore=shutil.ignore_patterns("*.txt", "*.out", "*.py"))
    text = (ENDS / case / "slurm.out").read_text()
    (sweep / "jobs" / f"slurm-{job}.out").write_text(text.replace(f"/tmp/h8cap/{case_sweep(case)}", str(sweep)))
    return sweep


def case_sweep(case: str) -> str:
    return {"torchrun_builtin_oom_node1": "tr_oom", "torchrun_command_oom_node1": "tr_cmd"}.get(case, "pack_cmd")


def end(sweep: Path, case: str, job: str, trial_id: str, pack_step: int | None = None) -> tuple[str, str | None]:
    st = states_from_sacct(parse_sacct((ENDS / case / "sacct.txt").read_text()))[job]
    sub = {"job_id": job, "key": job, "pack_step": pack_step}
    return status_and_reason(sweep, "00:10:00", sweep / "trials" / trial_id, sub, st)


def row(sweep: Path, trial_id: str, outcome_reason: str | None, status: str) -> dict:
    tdir = sweep / "trials" / trial_id
    trial = json.loads((tdir / "trial.json").read_text())["trial"]
    record = json.loads((tdir / "record.json").read_text()) if (tdir / "record.json").exists() else None
    return trial_row(trial, record, {"executor": "slurm", "status": status, "reason": outcome_reason, "job": "j"})


def test_builtin_trainer_under_torchrun_oom_on_node_1_reads_oom_though_srun_named_node_0(tmp_path):
    """2 nodes, one rank each, cluster.launch=torchrun, LAUNCHER_FAULT=oom:1:4: node 1's rank raised the OOM,
    node 0's rank failed in the collective it left, and srun saw node 0's agent exit first. Before: the reason
    quoted node 0's log's last line, torchrun's `====` rule, and the row read `failed`."""
    sweep = captured(tmp_path, "torchrun_builtin_oom_node1", "1331", {"000-ws2": "."})
    status, reason = end(sweep, "torchrun_builtin_oom_node1", "1331", "000-ws2")
    gloo = (
        "RuntimeError: [/__w/pytorch/pytorch/third_party/gloo/gloo/transport/tcp/pair.cc:537] Read error "
        "[10.77.0.12]:25232: Connection reset by peer. This is typically…"
    )
    assert status == "completed"  # the job's word: its batch script ended 0; the record says otherwise
    assert reason == (
        "task 0 (node 0's torchrun) on n1: Exited with exit code 1 (srun); srun exit 1; "
        f"node0 log ends: {gloo}; node1 log ends: {OOM}. GPU 1 has a total capacity of 79.10 GiB of which "
        "1.06 GiB is free. (LAUNCHER_FAULT stan…"  # each line cut to 160 characters
    )
    assert row(sweep, "000-ws2", reason, status)["status"] == "oom"


def test_a_node_log_ends_with_the_ranks_error_not_torchruns_summary():
    text = (ENDS / "torchrun_builtin_oom_node1" / "node1.attempt0.log").read_text()
    assert text.rstrip().endswith("=" * 60)
    assert meaningful_line(text).startswith(f"{OOM}. GPU 1 has")
    # A rank that said nothing before its agent's line (killed by a signal): the agent's line tells it.
    agent = next(ln for ln in text.splitlines() if "] failed (exitcode" in ln)
    assert len(agent) > 160
    assert meaningful_line("[W socket.cpp:207] warning\n" + text[text.index(agent) :]) == agent[:159] + "…"


def test_command_under_torchrun_task_1_is_node_1s_ranks_2_and_3(tmp_path):
    """job=command, 2 nodes × 2 ranks under torchrun; rank 3 (node 1) ran out of memory. srun named task 1, node
    1's agent. Before: the reason quoted rank1.attempt0.log, a rank of node 0 that only printed its step."""
    sweep = captured(tmp_path, "torchrun_command_oom_node1", "1339", {"000-ws4": "."})
    status, reason = end(sweep, "torchrun_command_oom_node1", "1339", "000-ws4")
    assert (status, reason) == (
        "completed",
        f"task 1 (node 1's torchrun) on n2: Exited with exit code 1 (srun); command exit 1; rank3 log ends: {OOM} "
        "(stand-in)",
    )


def test_packed_command_trials_end_by_their_own_lines_not_by_step_index(tmp_path):
    """sweep.pack, job=command, job.launch=srun, nodes [1, 2]: steps .0 and .1 are trial 0's probe and command
    (its command ran out of memory), .2 and .3 trial 1's; the job was scancelled while trial 1's command ran.
    Before: trial 0 read step .0 (its probe, COMPLETED) and trial 1 read step .1 (trial 0's command), `failed`
    with trial 0's srun error, where it was cancelled."""
    sweep = captured(tmp_path, "pack_command_cancelled", "1332", {"000-ws1": "000-ws1", "001-ws2": "001-ws2"})
    first = end(sweep, "pack_command_cancelled", "1332", "000-ws1", pack_step=0)
    assert first == (
        "failed",
        "step 1332.1 FAILED with exit code 1; task 0 on n1: Exited with exit code 1 (srun); command exit 1; "
        f"rank0 log ends: {OOM} (stand-in)",
    )
    assert row(sweep, "000-ws1", first[1], first[0])["status"] == "oom"
    second = end(sweep, "pack_command_cancelled", "1332", "001-ws2", pack_step=1)
    assert second == ("cancelled", "cancelled by uid 0 (scancel)")
    assert row(sweep, "001-ws2", second[1], second[0])["status"] == "cancelled"


def test_a_packed_trial_borrows_no_earlier_trials_srun_error(tmp_path):
    sweep = captured(tmp_path, "pack_command_cancelled", "1332", {"000-ws1": "000-ws1", "001-ws2": "001-ws2"})
    log = sweep / "jobs" / "slurm-1332.out"
    assert first_task_error(log, sweep / "trials" / "000-ws1") == "task 0 on n1: Exited with exit code 1"
    # Trial 1's own stretch (after trial 0's lines): srun's words on its cancelled step, not trial 0's exit 1.
    assert first_task_error(log, sweep / "trials" / "001-ws2") == "task 1 on n2: Terminated"
