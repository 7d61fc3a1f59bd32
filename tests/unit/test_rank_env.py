"""Rank discovery (launcher/train/env.py): one answer for rank, local rank, world size and the
rendezvous address under torchrun, plain srun (SLURM_* only), the local executor and a lone
process. A real plain-srun-style launch: tests/multiprocess/test_rank_env_srun.py."""

from __future__ import annotations

import pytest

from launcher.run.local import rank_env
from launcher.train.env import RankEnv, first_host, process_env

TORCHRUN_SOURCES = {
    "rank": "RANK",
    "local_rank": "LOCAL_RANK",
    "world_size": "WORLD_SIZE",
    "master_addr": "MASTER_ADDR",
    "master_port": "MASTER_PORT",
}


SLURM_SOURCES = {"rank": "SLURM_PROCID", "local_rank": "SLURM_LOCALID", "world_size": "SLURM_NTASKS"}


def test_torchrun_variables_win_over_slurms():
    """launch=torchrun on Slurm: one srun task per node (SLURM_PROCID = node index), torchrun spawns the ranks."""
    env = {
        "RANK": "3",
        "LOCAL_RANK": "1",
        "WORLD_SIZE": "4",
        "LOCAL_WORLD_SIZE": "2",
        "MASTER_ADDR": "gpu-003",
        "MASTER_PORT": "29400",
        "SLURM_JOB_ID": "777",
        "SLURM_PROCID": "1",
        "SLURM_LOCALID": "0",
        "SLURM_NTASKS": "2",
        "SLURM_JOB_NODELIST": "gpu-[003-004]",
    }
    assert process_env(env) == RankEnv(
        rank=3, local_rank=1, world_size=4, master_addr="gpu-003", master_port=29400, sources=TORCHRUN_SOURCES
    )


def test_plain_srun_sets_only_slurm_variables():
    """What `srun python -m launcher.train` gives a task when nothing exports MASTER_*: before, every
    such task took itself for rank 0 (RANK unset)."""
    env = {
        "SLURM_JOB_ID": "123456",
        "SLURM_PROCID": "1",
        "SLURM_LOCALID": "1",
        "SLURM_NTASKS": "2",
        "SLURM_JOB_NUM_NODES": "1",
        "SLURM_NODEID": "0",
        "SLURM_JOB_NODELIST": "node[03-04]",
    }
    assert process_env(env) == RankEnv(
        rank=1,
        local_rank=1,
        world_size=2,
        master_addr="node03",
        master_port=20000 + 123456 % 12000,
        sources={**SLURM_SOURCES, "master_addr": "SLURM_JOB_NODELIST", "master_port": "SLURM_JOB_ID"},
    )
    assert process_env(env).master_port == 23456


@pytest.mark.parametrize("exported", [True, False], ids=["sbatch_exports_master", "bare_srun"])
def test_two_nodes_two_tasks_each(exported):
    """srun --nodes=2 --ntasks-per-node=2: task t runs on node t // 2 as local rank t % 2."""
    job = {"SLURM_JOB_ID": "40001", "SLURM_NTASKS": "4", "SLURM_JOB_NUM_NODES": "2", "SLURM_JOB_NODELIST": "n[7-8]"}
    if exported:  # what the sbatch template exports for a trial (its port adds the trial's index)
        job |= {"MASTER_ADDR": "n7", "MASTER_PORT": str(20000 + (40001 + 3) % 12000)}
    master = (
        {"master_addr": "MASTER_ADDR", "master_port": "MASTER_PORT"}
        if exported
        else {"master_addr": "SLURM_JOB_NODELIST", "master_port": "SLURM_JOB_ID"}
    )
    got = [
        process_env(job | {"SLURM_PROCID": str(t), "SLURM_LOCALID": str(t % 2), "SLURM_NODEID": str(t // 2)})
        for t in range(4)
    ]
    assert got == [
        RankEnv(
            rank=t,
            local_rank=t % 2,
            world_size=4,
            master_addr="n7",
            master_port=24004 if exported else 24001,
            sources={**SLURM_SOURCES, **master},
        )
        for t in range(4)
    ]


def test_local_executor_environment():
    """The very variables launcher/run/local.py gives each rank (on top of this process's own)."""
    assert process_env(rank_env(1, 2, 34567, threads=1)) == RankEnv(
        rank=1, local_rank=1, world_size=2, master_addr="127.0.0.1", master_port=34567, sources=TORCHRUN_SOURCES
    )


def test_lone_process_is_rank_zero_of_one():
    assert process_env({"PATH": "/usr/bin"}) == RankEnv(
        rank=0,
        local_rank=0,
        world_size=1,
        master_addr="127.0.0.1",
        master_port=29500,
        sources=dict.fromkeys(["rank", "local_rank", "world_size", "master_addr", "master_port"], "default"),
    )


@pytest.mark.parametrize(
    "env,message",
    [
        ({"RANK": "0", "WORLD_SIZE": "2"}, "RANK is set but LOCAL_RANK not"),
        ({"SLURM_PROCID": "0", "SLURM_LOCALID": "0"}, "SLURM_PROCID is set but SLURM_NTASKS not"),
        ({"RANK": "2", "LOCAL_RANK": "0", "WORLD_SIZE": "2"}, "rank 2 (RANK) is outside 0..1 (world size 2)"),
        ({"RANK": "one", "LOCAL_RANK": "0", "WORLD_SIZE": "2"}, "RANK='one' is not an integer"),
        (
            {"SLURM_PROCID": "0", "SLURM_LOCALID": "0", "SLURM_NTASKS": "2", "SLURM_JOB_ID": "9"},
            "SLURM_JOB_NODELIST must name",
        ),
        (
            {"SLURM_PROCID": "0", "SLURM_LOCALID": "0", "SLURM_NTASKS": "2", "SLURM_JOB_NODELIST": "n1"},
            "SLURM_JOB_ID is not set",
        ),
        ({"RANK": "0", "LOCAL_RANK": "0", "WORLD_SIZE": "1", "MASTER_PORT": "70000"}, "MASTER_PORT=70000 is not"),
    ],
)
def test_broken_environments_say_which_variable(env, message):
    with pytest.raises(ValueError, match=message.replace("(", r"\(").replace(")", r"\)")):
        process_env(env)


@pytest.mark.parametrize(
    "nodelist,first",
    [
        ("n1", "n1"),
        ("node[03-04]", "node03"),
        ("gpu-[003-004,010],cpu1", "gpu-003"),
        ("a,b[1-2]", "a"),
        ("gpu[7,2-3]", "gpu7"),
        ("r[1-2]n[08-09]", "r1n08"),
        ("x-1.cluster", "x-1.cluster"),
    ],
)
def test_first_host_agrees_with_submitit(nodelist, first, monkeypatch):
    from submitit.slurm.slurm import SlurmJobEnvironment  # test-only cross-check: it reads os.environ

    monkeypatch.setenv("SLURM_JOB_NODELIST", nodelist)
    assert first_host(nodelist) == first == SlurmJobEnvironment().hostnames[0]


@pytest.mark.parametrize("nodelist", ["", "n[1-2", "[1-2]x]"])
def test_first_host_rejects_what_is_not_a_host_list(nodelist):
    with pytest.raises(ValueError, match="is not a Slurm host list"):
        first_host(nodelist)
