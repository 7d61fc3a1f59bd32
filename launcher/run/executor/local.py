"""LocalExecutor: a trial's ranks as processes on this machine, one trial after another
(launcher/run/local.py starts and watches them); nothing outlives the launcher."""

from __future__ import annotations

import shlex
import sys
from collections.abc import Callable, Sequence
from pathlib import Path

from rich.console import Console
from rich.progress import Progress

from launcher.config.errors import ConfigError
from launcher.config.validate_precision import check_fp8_device
from launcher.run.executor.base import Executor, NothingToCancel
from launcher.run.executor.rows import TrialRows, columns
from launcher.run.local import check_gpu_count, cuda_devices, rank_env, run_trial_dir
from launcher.run.local_command import command_processes, run_command_trial
from launcher.trials.folder import trial_dir
from launcher.trials.payload import Payload, payload_for
from launcher.trials.spec import Trial


class LocalExecutor(Executor):
    name = "local"

    def check_trials(self, trials: Sequence[Trial]) -> None:
        # One rank per GPU: run_local alone would stop only after the smaller sizes ran (as seen on an H100).
        if trials:
            check_gpu_count(self.cfg.cluster.device, max(t.world_size for t in trials))
        # cluster.device=auto: the device is known here, before any trial (fp8 needs a GPU).
        found = "cpu" if cuda_devices(self.cfg.cluster.device) is None else "cuda"
        check_fp8_device(str(self.cfg.precision), found)

    def check_scripts(self, planned_dir: Path, trials: Sequence[Trial]) -> None:
        return None  # no file of a local trial depends on more than its config, checked already

    def check_detach(self) -> None:
        raise ConfigError("--detach needs a Slurm cluster (cluster=slurm or cluster=devcluster); local trials run here")

    def run_batch(
        self, sweep_dir: Path, trials: Sequence[Trial], *, progress_bars: bool, payload: Payload | None = None
    ) -> None:
        c = self.cfg.cluster
        payload = payload or (payload_for(self.cfg) if self.cfg.job.kind != "command" else None)
        console = Console(stderr=True)
        with Progress(*columns(), console=console, disable=not progress_bars, refresh_per_second=2) as progress:
            rows = TrialRows(progress, trials)
            for t in trials:
                total = None if self.cfg.job.kind == "command" else t.steps  # a program's own count is not sweep.steps
                task, on_step = rows.start(t, total=total)
                tdir = trial_dir(sweep_dir, t.trial_id)
                if self.cfg.job.kind == "command" and not payload:
                    outcome = run_command_trial(tdir, self.cfg, t, on_step=on_step)
                else:
                    outcome = run_trial_dir(
                        tdir,
                        world_size=t.world_size,
                        threads=c.threads_per_rank,
                        timeout_s=c.trial_timeout_s,
                        on_step=on_step,
                        payload=payload,
                    )
                rows.end(task, t, total=total, ok=outcome["reason"] is None)

    def submit_detached(self, sweep_dir: Path, trials: Sequence[Trial]) -> None:
        self.check_detach()

    def interrupted(self, sweep_dir: Path, *, detach: bool, how: str = "Ctrl-C") -> None:
        return None  # run_processes stopped the ranks; run_trial_dir recorded the trial as cancelled

    def refresh(self, sweep_dir: Path) -> None:
        return None  # each trial's outcome.json is written as it ends

    def cancel(self, sweep_dir: Path, reason: str) -> list[str]:
        raise NothingToCancel(
            f"nothing to cancel: sweep {sweep_dir.name} runs locally (cluster={self.cfg.cluster.name}), inside the "
            "launcher that started it; Ctrl-C there stops it"
        )

    def dry_run(self, trial: Trial, make_folder: Callable[[], Path]) -> None:
        """Each rank's command line, its variables first (the port is picked when it runs)."""
        print(f"# trial {trial.trial_id}: {trial.world_size} ranks, global batch {trial.global_batch}, lr {trial.lr:g}")
        if self.cfg.job.kind == "command":
            self._dry_run_command(trial)
            return
        argv = payload_for(self.cfg).here(Path("<trial-dir>"), sys.executable)
        keys = ("MASTER_ADDR", "RANK", "WORLD_SIZE", "LOCAL_RANK", "OMP_NUM_THREADS")
        for rank in range(trial.world_size):
            env = rank_env(rank, trial.world_size, 0, self.cfg.cluster.threads_per_rank)
            shown = [*(f"{k}={shlex.quote(env[k])}" for k in keys), "MASTER_PORT=<free port>", *map(shlex.quote, argv)]
            print(" ".join(shown))

    def _dry_run_command(self, trial: Trial) -> None:
        """job=command: the processes started for it (after the link probe), their variables first."""
        tdir = Path("<trial-dir>")
        payload = payload_for(self.cfg, trial=trial, trial_dir=tdir)
        threads = self.cfg.cluster.threads_per_rank
        for p in command_processes(payload, tdir, world_size=trial.world_size, threads=threads, user_env={}):
            keys = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR") if payload.launch == "srun" else ()
            shown = [
                *(f"{k}={shlex.quote(p.env[k])}" for k in keys),
                *(f"{k}={shlex.quote(v)}" for k, v in payload.env),
            ]
            print(" ".join([*shown, *map(shlex.quote, p.argv), ">", str(p.log)]))
