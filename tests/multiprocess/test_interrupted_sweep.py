"""A real local sweep stopped by Ctrl-C (SIGINT) or SIGTERM while its second trial's ranks start: that
trial reads `cancelled` (not `failed`), the next `not started`, in results.csv and in `launcher status`
alike; no rank outlives the launcher; the recommendation says the sweep is incomplete; and the last line
says how to carry on (`launcher sweep --resume`). Ctrl-C of a Slurm sweep: tests/slurm/test_cancel_slurm.py."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

from launcher.cli import main
from launcher.run import local
from launcher.run.stopped import Terminated, sigterm_stops_as_ctrl_c
from launcher.run.sweep import load_sweep
from launcher.trials.folder import is_done
from tests.support.waiting import wait_for

pytestmark = pytest.mark.torch_dist

# signal → how the launcher names it, and its exit status (128 + the signal's number, as a shell reports it)
SIGNALS = {"SIGINT": ("Ctrl-C", 130), "SIGTERM": ("SIGTERM", 143)}


def _sigint_as_default() -> None:
    """In the launcher's process, before exec: a shell's background job (as CI may start pytest) ignores
    SIGINT, its children inherit that, and Python leaves an ignored SIGINT ignored."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def _processes_naming(folder: Path) -> list[str]:
    """Command lines of the live processes that name `folder` (its ranks name their trial.json)."""
    found = []
    for proc in Path("/proc").iterdir():
        try:
            argv = (proc / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:  # gone meanwhile, or not a process
            continue
        if str(folder) in argv and proc.name != str(os.getpid()):
            found.append(argv)
    return found


def _status_states(out: str) -> dict[str, str]:
    """trial → state, from `launcher status`'s table (columns trial, nodes, ranks, job, state, …)."""
    rows = [[c.strip() for c in ln.split("│")[1:-1]] for ln in out.splitlines() if ln.startswith("│")]
    return {r[0]: r[4] for r in rows}


@pytest.mark.parametrize("name", SIGNALS)
def test_a_stopped_sweep_reads_cancelled_and_not_started_and_says_how_to_carry_on(name, tmp_path, capsys):
    how, code = SIGNALS[name]
    sweep_dir = tmp_path / "stopped"
    argv = [sys.executable, "-m", "launcher", "sweep", "sweep.world_sizes=[1,2,3]", f"sweep.results_dir={tmp_path}"]
    with open(tmp_path / "launcher.log", "w") as log:
        proc = subprocess.Popen(
            [*argv, "sweep.name=stopped", "--quiet"],
            stdout=log,
            stderr=subprocess.STDOUT,
            preexec_fn=_sigint_as_default,
        )
    try:
        # The 1-rank trial ran to its end; the 2-rank trial's ranks are starting (their logs just opened).
        started = sweep_dir / "trials" / "001-ws2" / "rank0.log"
        wait_for(started.exists, 300, "the second trial's rank log", every=0.05)
        proc.send_signal(getattr(signal, name))
        assert proc.wait(timeout=60) == code
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    said = (tmp_path / "launcher.log").read_text().splitlines()
    assert said[-1] == (
        f"launcher: interrupted ({how}): 1 trial cancelled, 1 trial not started; the table of what finished is in "
        f"{sweep_dir}; carry on with: launcher sweep --resume {sweep_dir} (runs the 2 trial(s) not finished)"
    )
    assert _processes_naming(sweep_dir) == []  # the ranks were stopped, not left running without a parent
    table = pd.read_csv(sweep_dir / "results.csv")
    assert list(zip(table["trial_id"], table["status"], table["reason"].fillna(""), strict=True)) == [
        ("000-ws1", "completed", ""),
        ("001-ws2", "cancelled", f"cancelled by the user ({how}); its ranks were stopped"),
        ("002-ws3", "not started", ""),
    ]
    _, _, trials = load_sweep(sweep_dir)
    assert [is_done(sweep_dir, t) for t in trials] == [True, False, False]  # what --resume runs again
    report = " ".join((sweep_dir / "report.md").read_text().split())
    assert (
        "; incomplete sweep: 2 of 3 trials did not finish (2 ranks cancelled, 3 ranks not started); only the sizes "
        "that completed were compared"
    ) in report
    # `launcher status` and `launcher collect` call each trial the same.
    capsys.readouterr()
    assert main(["status", str(sweep_dir)]) == 0
    states = _status_states(capsys.readouterr().out)
    assert main(["collect", str(sweep_dir)]) == 0
    collected = pd.read_csv(sweep_dir / "results.csv")
    assert states == dict(zip(collected["trial_id"], collected["status"], strict=True))
    assert "incomplete sweep: 2 of 3 trials did not finish" in " ".join(capsys.readouterr().out.split())


def test_a_signal_landing_while_ranks_start_leaves_none_running(tmp_path, monkeypatch):
    """SIGTERM (or Ctrl-C) right after a rank's fork, before the launcher holds its Popen: the signal waits
    until every rank started (launcher/signals.py), then all are stopped. Cut there, the rank would run on
    with nothing to stop it, as it did under load in the sweep test above."""
    started: list[subprocess.Popen] = []
    real_popen = subprocess.Popen

    def popen_then_signal(*args, **kwargs):
        started.append(real_popen(*args, **kwargs))
        if len(started) == 1:
            os.kill(os.getpid(), signal.SIGTERM)  # lands before run_processes can keep the first rank
        return started[-1]

    monkeypatch.setattr(local.subprocess, "Popen", popen_then_signal)
    sleeper = [sys.executable, "-c", "import time; time.sleep(120)"]
    plan = [local.Process(argv=sleeper, env=dict(os.environ), log=tmp_path / f"rank{r}.log") for r in range(2)]
    with pytest.raises(Terminated), sigterm_stops_as_ctrl_c():
        local.run_processes(plan, timeout_s=300)
    try:
        assert [p.poll() for p in started] == [-signal.SIGTERM, -signal.SIGTERM]  # both started, both stopped
    finally:
        for p in started:
            if p.poll() is None:
                p.kill()
                p.wait()
