"""USR1 (Slurm's warning before the time limit, or preemption) on a requeue-able run, on the real
dev cluster, for the launch shapes that used to lose it:

- torchrun launch: the agents survive USR1 (they ignore it), their workers checkpoint, the step
  ends cleanly, the job script finds the marker and requeues, and the resumed run ends with the
  parameters of a run never interrupted;
- plain srun with 2 ranks per node: exactly one rank acts as rank 0, so the run requeues and
  completes with one record.json and no rank crashing.
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest
import torch

from launcher.config.compose import compose_config
from launcher.io import read_json
from launcher.run.run import as_sweep, run_trials
from launcher.run.sweep import create_sweep_dir, execute
from launcher.slurm.submit import job_requests, submit_jobs, write_scripts
from tests.slurm.test_faults import start_now
from tests.support.uninterrupted import DEV, STEPS
from tests.support.waiting import wait_for

pytestmark = pytest.mark.slurm

STEP_LINE = re.compile(r"^step \d+/", re.M)


def submit_run(tmp_path: Path, env: dict[str, str], overrides: list[str]):
    """`launcher run --requeue` with these overrides, its rank 0 saving the final parameters:
    (cfg, trials, sweep folder, trial folder, job id)."""
    overrides = [
        *DEV,
        *overrides,
        f"run.steps={STEPS}",
        "run.warmup_steps=2",
        "run.checkpoint_every=0",
        "run.requeue=true",
        f"sweep.results_dir={tmp_path}",
    ]
    cfg = as_sweep(compose_config(overrides))
    trials = run_trials(cfg)
    sweep_dir = create_sweep_dir(cfg, [(t, cfg) for t in trials], overrides)
    jobs = job_requests(cfg, sweep_dir, trials, payload_args=("--save-params", str(sweep_dir / "params.pt")))
    write_scripts(sweep_dir, jobs)
    submit_jobs(sweep_dir, jobs, env)
    tdir = sweep_dir / "trials" / trials[0].trial_id
    return cfg, trials, sweep_dir, tdir, read_json(tdir / "submission.json")["key"]


def usr1_mid_run(env: dict[str, str], tdir: Path, job: str, logs: str) -> str:
    """Once a log shows a training step, `scancel --signal=USR1` the job; wait for attempt 0 to end
    and the requeued job to run again. Returns attempt 0's srun exit code."""

    def training() -> bool:
        return any(STEP_LINE.search(p.read_text(errors="replace")) for p in tdir.glob(logs))

    wait_for(training, 180, f"a `step N/` line in {tdir}/{logs}")
    subprocess.run(["scancel", "--signal=USR1", job], env=env, check=True)
    wait_for(lambda: (tdir / "exit_code.attempt0").exists(), 120, "attempt 0 to end")
    text = "".join(p.read_text(errors="replace") for p in sorted(tdir.glob("*.attempt0.log")))
    assert (tdir / "checkpointed.attempt0").exists(), f"attempt 0 did not checkpoint on USR1:\n{text[-4000:]}"
    start_now(env, job, restarts=1)
    return (tdir / "exit_code.attempt0").read_text().strip()


def resumed_row(cfg, trials, sweep_dir: Path, tdir: Path) -> None:
    """Collect the requeued run: its one row completed, requeued once, resumed from the step it checkpointed at."""
    on_signal = read_json(tdir / "checkpointed.attempt0")["step"]
    row = execute(sweep_dir, cfg, trials, progress_bars=False).table.iloc[0]
    assert (row["status"], row["reason"]) == (
        "completed",
        f"requeued 1×, then completed (resumed from step {on_signal})",
    )


def test_torchrun_agents_survive_usr1_and_the_run_resumes_to_the_uninterrupted_parameters(
    devcluster,
    tmp_path,
    uninterrupted,
):
    env = devcluster.env()
    cfg, trials, sweep_dir, tdir, job = submit_run(tmp_path, env, ["cluster.launch=torchrun", "cluster.nodes=2"])
    assert usr1_mid_run(env, tdir, job, "node*.attempt0.log") == "0"  # no agent died of USR1: srun exited 0
    resumed_row(cfg, trials, sweep_dir, tdir)
    for log in tdir.glob("node*.log"):
        assert "User defined signal" not in log.read_text(errors="replace"), log
    final = torch.load(sweep_dir / "params.pt")
    assert max((final[k] - uninterrupted[k]).abs().max().item() for k in uninterrupted) <= 1e-6


def test_srun_two_ranks_per_node_requeued_ends_with_one_record_and_no_rank_crash(devcluster, tmp_path):
    env = devcluster.env()
    cfg, trials, sweep_dir, tdir, job = submit_run(tmp_path, env, ["cluster.nodes=2", "cluster.tasks_per_node=2"])
    assert trials[0].world_size == 4
    assert usr1_mid_run(env, tdir, job, "rank0.attempt0.log") == "0"

    result = execute(sweep_dir, cfg, trials, progress_bars=False)
    row = result.table.iloc[0]
    assert row["status"] == "completed" and row["reason"].startswith("requeued 1×, then completed (resumed from step ")
    # Attempt 0 checkpointed and left no record; attempt 1 wrote the one record (rank 0 only).
    assert sorted(p.name for p in tdir.glob("record*.json")) == ["record.json"]
    record = read_json(tdir / "record.json")
    assert record["status"] == "completed" and [b["rank"] for b in record["rank_bindings"]] == [0, 1, 2, 3]
    logs = sorted(tdir.glob("rank*.attempt*.log"))
    assert [p.name for p in logs] == [f"rank{r}.attempt{a}.log" for r in range(4) for a in range(2)]
    for log in logs:
        assert "Traceback" not in log.read_text(errors="replace"), log
    assert [(tdir / f"exit_code.attempt{a}").read_text().strip() for a in range(2)] == ["0", "0"]
