"""Slurm's GPU binding variants (cluster.gpus_per_task, cluster.gpu_bind) rendered and bound right, the
rendezvous port below the kernel's ephemeral range, the record's device name the detected one, and
layouts without data parallelism (tp, pipeline) called strong scaling. Golden scripts:
tests/golden/gpus_per_task_srun.sbatch and gpu_bind_*.sbatch (tests/unit/test_render.py); the dev
cluster's `sbatch --test-only` of each: tests/slurm/test_slurm_cluster.py."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from launcher.config.compose import compose_config
from launcher.config.errors import ConfigError
from launcher.results.table import trial_row
from launcher.train import measure
from launcher.train.env import bound_gpu, device_slot, master_port
from launcher.trials.spec import sweep_trials
from tests.support.render_cases import scripts


def _lines(name: str) -> list[str]:
    ((_, script),) = scripts(name)
    return script.splitlines()


def test_gpus_per_task_replaces_the_gres_line_on_the_job_and_the_step():
    lines = _lines("gpus_per_task_srun")
    assert "#SBATCH --gpus-per-task=1" in lines and not any(x.startswith("#SBATCH --gres") for x in lines)
    assert "        --gpus-per-task=1 \\" in lines  # the srun step's own


@pytest.mark.parametrize(
    ("name", "bind"),
    [("gpu_bind_single", "single:1"), ("gpu_bind_closest", "closest"), ("gpu_bind_map_gpu", "map_gpu:1,0")],
)
def test_gpu_bind_on_the_job_and_the_step(name, bind):
    lines = _lines(name)
    assert f"#SBATCH --gpu-bind={bind}" in lines and "#SBATCH --gres=gpu:2" in lines
    assert f"        --gpu-bind={bind} \\" in lines


def test_binding_values_are_slurms_forms_on_srun_launch():
    with pytest.raises(ConfigError, match=r"^cluster.gpu_bind='closest; rm' is not a --gpu-bind form"):
        compose_config(["cluster=devcluster", "cluster.gpu_bind='closest; rm'"])
    with pytest.raises(ConfigError, match=r"cluster.launch=torchrun runs one task per node; set cluster.launch=srun"):
        compose_config(["cluster=devcluster", "cluster.launch=torchrun", "cluster.gpus_per_task=1"])
    with pytest.raises(ConfigError, match=r"cluster.gpus_per_task=0"):
        compose_config(["cluster=devcluster", "cluster.gpus_per_task=0"])


def test_a_commands_torchrun_step_asks_for_the_nodes_gpus_unbound():
    """Issue 30 item 2: under per-task binding torchrun's one task per node inherited the job's --gpus-per-task=1
    (rank 1 saw no cuda:1); its step drops the job's binding variables and asks for the node's 2 GPUs."""
    lines = _lines("command_torchrun_gpus")
    assert "#SBATCH --gpus-per-task=1" in lines  # the job's allocation and the probe's step keep the binding
    step = lines.index("    env -u SLURM_GPUS_PER_TASK -u SLURM_GPU_BIND \\")
    assert lines[step + 1].startswith('    srun --nodes="$nodes" --ntasks="$nodes" --ntasks-per-node=1 ')
    assert lines[step + 3] == "        --gres=gpu:2 \\"
    # job.launch decides how a command's ranks start; cluster.launch=torchrun is the built-in trainer's, refused there.
    cfg = compose_config(
        [
            "cluster=devcluster",
            "cluster.launch=torchrun",
            "cluster.gpus_per_task=1",
            "job=command",
            "job.argv=[python,t.py]",
        ]
    )
    assert cfg.cluster.gpus_per_task == 1


@pytest.mark.parametrize("visible", ["0", "1", "7"])
def test_a_task_that_sees_one_gpu_takes_it_whatever_its_local_rank(visible):
    # srun --gpu-bind=single:1 | closest | map_gpu:…: Slurm leaves each task one CUDA_VISIBLE_DEVICES id.
    env = {"SLURM_PROCID": "5", "SLURM_LOCALID": "1", "SLURM_NTASKS": "8", "CUDA_VISIBLE_DEVICES": visible}
    assert device_slot(env, 1, 1) == 0 and bound_gpu(env, 1) == visible


def test_ranks_sharing_one_visible_gpu_are_still_refused():
    torchrun = {"RANK": "1", "LOCAL_RANK": "1", "CUDA_VISIBLE_DEVICES": "0"}  # torchrun's workers share the agent's
    with pytest.raises(ValueError, match="local rank 1 has no CUDA device of its own"):
        device_slot(torchrun, 1, 1)


def _ephemeral_low() -> int:
    try:
        return int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return 32768  # Linux's usual 32768–60999


@pytest.mark.parametrize("job_id", [0, 1, 11999, 12000, 19999, 31999, 99999, 4_294_967_294])
def test_the_slurm_port_stays_below_the_ephemeral_range(job_id):
    port, source = master_port({"SLURM_JOB_ID": str(job_id)}, slurm=True)
    assert source == "SLURM_JOB_ID" and 20000 <= port < min(32768, _ephemeral_low())
    assert port == 20000 + job_id % 12000


def test_the_job_script_derives_the_same_port():
    assert '    export MASTER_PORT="$(( 20000 + (SLURM_JOB_ID + index) % 12000 ))"' in _lines("devcluster_2nodes")


def test_the_record_names_the_detected_gpu(monkeypatch):
    cfg = compose_config(["cluster.device_name=A100-SXM4-80GB"])
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda device=None: "NVIDIA H100 80GB HBM3")
    assert measure.recorded_device_name(cfg, torch.device("cuda", 0)) == "NVIDIA H100 80GB HBM3"
    assert measure.recorded_device_name(cfg, torch.device("cpu")) == "A100-SXM4-80GB"  # nothing detected on CPU


@pytest.mark.parametrize(
    ("layout", "scaling"), [("tp", "strong"), ("pipeline", "strong"), ("ddp", "weak"), ("dp_pp", "weak")]
)
def test_layouts_without_data_parallelism_are_strong_scaling(layout, scaling):
    cfg = compose_config([f"parallel={layout}", "model.n_layers=4", "sweep.world_sizes=[2,4]"])
    trials = sweep_trials(cfg)
    assert [t.scaling for t in trials] == [scaling, scaling]
    if scaling == "strong":
        assert len({t.global_batch for t in trials}) == 1  # what strong means: the global batch is fixed
    row = trial_row(trials[1].__dict__ | {"layout": layout}, None, None)
    assert row["scaling"] == scaling
