"""A Slurm task's own GPU when Slurm gave it a set of several (issue 30 item 3): `--gpu-bind=closest` (a
NUMA domain's GPUs), `per_task:N`, multi-bit `mask_gpu` masks, `map_gpu` with repeats, `single:N`. Each
environment is what Slurm 22.05 leaves in a task of a step (captured on the dev cluster:
SLURM_GPUS_ON_NODE, SLURM_STEP_TASKS_PER_NODE, SLURM_DISTRIBUTION, the job's SLURM_GPU_BIND /
SLURM_GPUS_PER_TASK), with the CUDA_VISIBLE_DEVICES the binding gives that task. The rule:
launcher/trials/slurm_gpus.py, through env.device_slot / bound_gpu and dist.pick_device."""

from __future__ import annotations

import pytest
import torch

from launcher.train import dist
from launcher.train.env import bound_gpu, device_slot
from launcher.trials.rank_exec import rank_environ


def _task(local: int, visible: str, tasks: int = 8, gpus: int = 8, **more: str) -> dict[str, str]:
    """Task `local` of a one-node step of `tasks` tasks on `gpus` GPUs that sees `visible`."""
    return {
        "SLURM_PROCID": str(local),
        "SLURM_LOCALID": str(local),
        "SLURM_NTASKS": str(tasks),
        "SLURM_NODEID": "0",
        "SLURM_STEP_TASKS_PER_NODE": str(tasks),
        "SLURM_TASKS_PER_NODE": str(tasks),
        "SLURM_GPUS_ON_NODE": str(gpus),
        "SLURM_DISTRIBUTION": "block",
        "CUDA_VISIBLE_DEVICES": visible,
        **more,
    }


def _gpus(envs: list[dict[str, str]]) -> list[str | None]:
    return [bound_gpu(env, int(env["SLURM_LOCALID"])) for env in envs]


def test_closest_under_slurms_default_distribution_gives_each_of_a_domains_tasks_its_own_gpu():
    # 8 tasks, 2 NUMA domains of 4 GPUs; the default socket distribution is cyclic: even tasks on socket 0.
    envs = [_task(r, "0,1,2,3" if r % 2 == 0 else "4,5,6,7", SLURM_GPU_BIND="closest") for r in range(8)]
    assert _gpus(envs) == ["0", "4", "1", "5", "2", "6", "3", "7"]
    assert [device_slot(env, r, 4) for r, env in enumerate(envs)] == [0, 0, 1, 1, 2, 2, 3, 3]


def test_closest_with_block_distribution_fills_the_first_domain_first():
    envs = [_task(r, "0,1,2,3" if r < 4 else "4,5,6,7", SLURM_GPU_BIND="closest") for r in range(8)]
    for env in envs:
        env["SLURM_DISTRIBUTION"] = "block:block"
    assert _gpus(envs) == ["0", "1", "2", "3", "4", "5", "6", "7"]


def test_closest_on_the_second_node_reads_that_nodes_task_count():
    # Node 1 of "8,4": its 4 tasks on 2 domains of 2 GPUs, block:block → tasks 0,1 | 2,3.
    envs = [_task(r, "0,1" if r < 2 else "2,3", gpus=4, SLURM_GPU_BIND="closest") for r in range(4)]
    for env in envs:
        env |= {"SLURM_NODEID": "1", "SLURM_STEP_TASKS_PER_NODE": "8,4", "SLURM_DISTRIBUTION": "block:block"}
    assert _gpus(envs) == ["0", "1", "2", "3"]


def test_multi_bit_masks_give_each_task_of_a_mask_its_own_gpu():
    # mask_gpu:0x3,0xC: tasks 0, 2 get GPUs 0-1, tasks 1, 3 GPUs 2-3 (Slurm: task r takes mask r % n).
    masks = {"SLURM_GPU_BIND": "verbose,mask_gpu:0x3,0xC"}
    envs = [_task(r, "0,1" if r % 2 == 0 else "2,3", tasks=4, gpus=4, **masks) for r in range(4)]
    assert _gpus(envs) == ["0", "2", "1", "3"]


def test_per_task_sets_are_each_tasks_own():
    envs = [_task(r, f"{2 * r},{2 * r + 1}", tasks=4, SLURM_GPU_BIND="per_task:2") for r in range(4)]
    assert _gpus(envs) == ["0", "2", "4", "6"]
    gpt = [_task(r, f"{2 * r},{2 * r + 1}", tasks=4, SLURM_GPUS_PER_TASK="2") for r in range(4)]
    assert _gpus(gpt) == ["0", "2", "4", "6"]


@pytest.mark.parametrize("bind", ["map_gpu:0*2,1*2", "single:2"])
def test_two_tasks_given_one_gpu_are_refused_not_stacked(bind):
    envs = [_task(r, "0" if r < 2 else "1", tasks=4, gpus=2, SLURM_GPU_BIND=bind) for r in range(4)]
    assert _gpus(envs) == ["0", None, "1", None]
    with pytest.raises(
        ValueError,
        match=r"^local rank 1 has no CUDA device of its own: this process sees 1 \(CUDA_VISIBLE_DEVICES=0\), "
        r"Slurm gave them to 1 task\(s\) of lower local rank too, and ranks never share one",
    ):
        device_slot(envs[1], 1, 1)


def test_tasks_that_see_the_nodes_gpus_take_their_local_rank():
    envs = [_task(r, "0,1,2,3", tasks=4, gpus=4) for r in range(4)]
    assert _gpus(envs) == ["0", "1", "2", "3"]
    torchrun = {"RANK": "6", "LOCAL_RANK": "2", "SLURM_PROCID": "1", "SLURM_GPU_BIND": "closest"}
    assert device_slot(torchrun | {"CUDA_VISIBLE_DEVICES": "0,1,2,3"}, 2, 4) == 2  # the agent's task's binding


def test_pick_device_sets_the_tasks_own_cuda_device(monkeypatch):
    env = _task(5, "4,5,6,7", SLURM_GPU_BIND="closest")
    monkeypatch.setattr(dist.os, "environ", env)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 4)
    chosen = []
    monkeypatch.setattr(torch.cuda, "set_device", chosen.append)
    assert dist.pick_device("cuda", 5) == torch.device("cuda", 2) and chosen == [2]


def test_rank_exec_gives_a_bound_task_local_rank_of_its_gpu_among_those_it_sees():
    """job.launch=srun (issue 30 item 2): `cuda:{LOCAL_RANK}` is the task's own GPU; SLURM_LOCALID stays."""
    one_each = _task(1, "1", tasks=2, gpus=2, SLURM_GPUS_PER_TASK="1")
    assert rank_environ(one_each)["LOCAL_RANK"] == "0" and rank_environ(one_each)["SLURM_LOCALID"] == "1"
    domain = rank_environ(_task(5, "4,5,6,7", SLURM_GPU_BIND="closest"))
    assert (domain["LOCAL_RANK"], domain["RANK"]) == ("2", "5")
    unbound = rank_environ(_task(3, "0,1,2,3", tasks=4, gpus=4))
    assert unbound["LOCAL_RANK"] == "3"
    cpu = {k: v for k, v in _task(3, "", tasks=4).items() if k != "CUDA_VISIBLE_DEVICES"}
    assert rank_environ(cpu)["LOCAL_RANK"] == "3"  # no GPU: Slurm's local id
