"""What each rank runs on: CPUs named on every srun step, threads that fit them, one GPU per rank
(never shared), and what each rank was given recorded in the record's `rank_bindings`. Pure
checks; the dev cluster with stand-in GPUs: tests/slurm/test_binding_slurm.py."""

from __future__ import annotations

import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from launcher.cli import main
from launcher.config.compose import compose_config
from launcher.config.errors import ConfigError
from launcher.io import atomic_write_json
from launcher.run import local
from launcher.slurm.submit import job_requests
from launcher.train.env import bound_gpu, device_slot
from launcher.trials.folder import trial_document
from launcher.trials.spec import make_trial, sweep_trials

SWEEP_DIR = Path("/scratch/results/binding")


def _script(overrides: list[str]) -> str:
    cfg = compose_config(["cluster=devcluster", "cluster.python=/opt/venv/bin/python", *overrides])
    (job,) = job_requests(cfg, SWEEP_DIR, sweep_trials(cfg))
    return job.script


def _srun_words(script: str) -> list[str]:
    """The words of the script's srun command line (continuation lines joined)."""
    text = script.replace("\\\n", " ")
    line = next(ln for ln in text.splitlines() if ln.strip().startswith("srun "))
    return shlex.split(line)


def test_srun_step_names_each_ranks_cpus():
    words = _srun_words(
        _script(
            ["sweep.nodes=[2]", "cluster.tasks_per_node=2", "cluster.cpus_per_task=3", "cluster.threads_per_rank=3"]
        )
    )
    assert "--cpus-per-task=3" in words and "--ntasks-per-node=2" in words


def test_torchrun_task_holds_the_cpus_of_every_rank_it_spawns():
    script = _script(
        [
            "sweep.nodes=[2]",
            "cluster.launch=torchrun",
            "cluster.gpus_per_node=4",
            "cluster.cpus_per_task=2",
            "cluster.threads_per_rank=2",
        ]
    )
    words = _srun_words(script)
    assert "--ntasks-per-node=1" in words and "--cpus-per-task=8" in words  # 4 ranks × 2 CPUs
    assert "--nproc-per-node=4" in words
    assert "#SBATCH --ntasks-per-node=4\n#SBATCH --cpus-per-task=2\n" in script  # the allocation: 4 × 2 per node
    assert "export OMP_NUM_THREADS=2 MKL_NUM_THREADS=2" in script


@pytest.mark.parametrize("kind", ["sweep", "run"])
def test_more_threads_than_cpus_is_refused_on_slurm(kind, tmp_path, capsys):
    argv = [
        kind,
        "cluster=devcluster",
        "cluster.threads_per_rank=4",
        "cluster.cpus_per_task=2",
        f"sweep.results_dir={tmp_path}",
    ]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err == (
        "launcher: error: cluster.threads_per_rank=4 is more than cluster.cpus_per_task=2, so each rank's "
        "threads would share its CPUs; set cluster.cpus_per_task=4 (or cluster.threads_per_rank=2)\n"
    )
    assert not list(tmp_path.iterdir())


def test_threads_per_rank_stays_free_locally():
    """cluster=local binds no CPUs (the ranks share this machine), so only Slurm checks it."""
    assert compose_config(["cluster.threads_per_rank=2"]).cluster.threads_per_rank == 2


def test_cuda_ranks_beyond_the_nodes_gpus_are_refused():
    with pytest.raises(
        ConfigError,
        match=r"^cluster.tasks_per_node=4 ranks would share cluster.gpus_per_node=2 GPUs: "
        r"one rank per GPU; set cluster.tasks_per_node=2 \(or null: one per GPU\)$",
    ):
        compose_config(["cluster=slurm", "cluster.device=cuda", "cluster.gpus_per_node=2", "cluster.tasks_per_node=4"])
    # CPU trials on stand-in GPUs (the dev cluster) may place ranks as they like.
    compose_config(["cluster=devcluster", "cluster.gpus_per_node=2", "cluster.tasks_per_node=4"])


def test_ranks_sharing_a_device_list_take_the_local_ranks_device():
    torchrun = {"RANK": "5", "LOCAL_RANK": "1", "CUDA_VISIBLE_DEVICES": "0,1,2,3"}
    assert device_slot(torchrun, 1, 4) == 1 and bound_gpu(torchrun, 1) == "1"
    srun_step = {"SLURM_PROCID": "6", "SLURM_LOCALID": "2", "CUDA_VISIBLE_DEVICES": "4,5,6,7"}
    assert device_slot(srun_step, 2, 4) == 2 and bound_gpu(srun_step, 2) == "6"


def test_a_task_slurm_bound_to_its_own_gpu_uses_it():
    per_task = {"SLURM_PROCID": "3", "SLURM_LOCALID": "3", "SLURM_GPUS_PER_TASK": "1", "CUDA_VISIBLE_DEVICES": "3"}
    assert device_slot(per_task, 3, 1) == 0 and bound_gpu(per_task, 3) == "3"


def test_a_rank_without_a_device_of_its_own_is_refused_not_stacked():
    env = {"RANK": "2", "LOCAL_RANK": "2", "CUDA_VISIBLE_DEVICES": "0,1"}
    with pytest.raises(
        ValueError,
        match=r"^local rank 2 has no CUDA device of its own: this process sees 2 "
        r"\(CUDA_VISIBLE_DEVICES=0,1\) and ranks never share one; run at most 2",
    ):
        device_slot(env, 2, 2)
    assert bound_gpu(env, 2) is None  # a CPU trial records no GPU rather than failing
    assert bound_gpu({"RANK": "0", "LOCAL_RANK": "0"}, 0) is None


def test_local_executor_refuses_more_ranks_than_gpus_before_starting_any(tmp_path, monkeypatch):
    cfg = compose_config(["cluster.device=cuda"])
    atomic_write_json(
        tmp_path / "trial.json", trial_document(make_trial(cfg, index=0, world_size=3, steps=2, warmup_steps=1), cfg)
    )
    monkeypatch.setattr(local, "cuda_devices", lambda device: 2)
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0,1")
    with pytest.raises(
        ConfigError,
        match=r"^3 ranks on this machine's 2 CUDA device\(s\) \(CUDA_VISIBLE_DEVICES=0,1\): "
        r"one rank per GPU, never shared",
    ):
        local.run_local(tmp_path, world_size=3, threads=1, timeout_s=60)
    assert not list(tmp_path.glob("rank*.log"))  # refused before any rank started


def test_a_local_sweep_too_big_for_the_gpus_is_refused_whole_before_anything_runs(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(local, "cuda_devices", lambda device: 1)
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    code = main(["sweep", "cluster.device=cuda", "sweep.world_sizes=[1,2]", f"sweep.results_dir={tmp_path}", "--quiet"])
    assert code == 2
    assert capsys.readouterr().err.strip() == (
        "launcher: error: 2 ranks on this machine's 1 CUDA device(s): one rank per GPU, never shared; measure at "
        "most 1 rank(s) here (sweep.world_sizes / run.world_size), or set cluster.device=cpu"
    )
    assert not list(tmp_path.iterdir())  # no sweep folder: the 1-rank trial never ran


def test_cpu_trials_need_no_gpu_count():
    assert local.cuda_devices("cpu") is None
    if not local.NVIDIA_DRIVER.exists():
        assert local.cuda_devices("auto") is None  # no driver: auto is CPU, and torch is not imported for it


def test_torchrun_agent_ignores_usr1_and_its_workers_can_still_catch_it():
    """The script starts the agent through `bash -c 'trap "" USR1; exec "$@"'`: the agent ignores
    USR1 (Slurm signals every process of the step: the agent must survive it while its workers,
    which install their own handler, checkpoint)."""
    words = _srun_words(_script(["sweep.nodes=[2]", "cluster.launch=torchrun"]))
    at = words.index("bash")
    wrapper = words[at : at + 4]
    assert wrapper == ["bash", "-c", 'trap "" USR1; exec "$@"', "torchrun"]
    probe = (
        "import os, signal; ignored = signal.getsignal(signal.SIGUSR1) == signal.SIG_IGN; "
        "signal.signal(signal.SIGUSR1, lambda *a: print('caught')); os.kill(os.getpid(), signal.SIGUSR1); "
        "print('ignored' if ignored else 'default')"
    )
    out = subprocess.run(
        [*wrapper, sys.executable, "-c", probe], capture_output=True, text=True, check=True, timeout=30
    )
    assert out.stdout.split() == ["caught", "ignored"]


"""Stand-in GPUs per node in the binding test: the dev cluster's own count."""
