"""Who this process is in the job: the one place in the payload that reads rank, local rank,
world size and the rendezvous address from the environment.

- torchrun, and the local executor (which sets the same variables): RANK, LOCAL_RANK, WORLD_SIZE.
- plain `srun`, one task per rank: Slurm sets only SLURM_PROCID, SLURM_LOCALID, SLURM_NTASKS.
  (Under `launch=torchrun` on Slurm both are set; SLURM_PROCID is then the node's index, one
  task per node, not the rank: torchrun's variables win.)
- neither: a lone process, rank 0 of 1.

MASTER_ADDR/MASTER_PORT are kept when set (the sbatch template exports them per trial); under
Slurm without them, the first host of SLURM_JOB_NODELIST and 20000 + SLURM_JOB_ID % 12000.

Slurm's variables are read here rather than through submitit's helpers: `submitit.JobEnvironment`
and `helpers.TorchDistributedEnvironment` only recognise a job that submitit itself submitted
(SUBMITIT_EXECUTOR=slurm; under plain srun they raise "Could not figure out which environment"),
they read os.environ rather than a given mapping, and TorchDistributedEnvironment picks
MASTER_PORT with a generator seeded by the job id (20000..60000), not the template's rule.
The host-list parsing is checked against submitit's in tests/unit/test_rank_env.py.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass

from launcher.trials.slurm_gpus import task_slot

SLURM_PORT_BASE, SLURM_PORT_SPAN = 20000, 12000
"""Under Slurm, MASTER_PORT = 20000 + SLURM_JOB_ID % 12000 (the sbatch template renders the same
rule): a port fixed per job keeps two jobs' ranks on a shared node from joining each other, and
20000..31999 stays below the kernel's ephemeral range (/proc/sys/net/ipv4/ip_local_port_range,
usually 32768–60999), where any outgoing connection on the node may already hold the port."""
DEFAULT_ADDR, DEFAULT_PORT = "127.0.0.1", 29500  # torch's own defaults; only a lone process uses them
DEFAULT = "default"
"""The source named for a value no variable gave."""

TORCHRUN = {"rank": "RANK", "local_rank": "LOCAL_RANK", "world_size": "WORLD_SIZE"}
SLURM = {"rank": "SLURM_PROCID", "local_rank": "SLURM_LOCALID", "world_size": "SLURM_NTASKS"}


@dataclass(kw_only=True, frozen=True)
class RankEnv:
    rank: int
    """Global rank, 0 ≤ rank < world_size."""
    local_rank: int
    """Rank on this node (selects the GPU)."""
    world_size: int
    """Ranks in the trial (the job step under srun)."""
    master_addr: str
    """Host of the rendezvous store (rank 0's, or torchrun's agent's)."""
    master_port: int
    """Port of the rendezvous store."""
    sources: dict[str, str]
    """Field name → the variable it came from ("SLURM_JOB_ID" for a derived port, "default" for none)."""


def process_env(environ: Mapping[str, str]) -> RankEnv:
    """This process's place in the job, from `environ` (os.environ in the payload)."""
    slurm = "RANK" not in environ and "SLURM_PROCID" in environ
    names = SLURM if slurm else TORCHRUN if "RANK" in environ else None
    if names is None:
        rank, local_rank, world_size = 0, 0, 1
        sources = dict.fromkeys(TORCHRUN, DEFAULT)
    else:
        missing = [name for name in names.values() if name not in environ]
        if missing:
            raise ValueError(f"{names['rank']} is set but {' and '.join(missing)} not: a launch sets all three")
        rank, local_rank, world_size = (read_int(environ, names[field]) for field in TORCHRUN)
        sources = dict(names)
    if not 0 <= rank < world_size:
        raise ValueError(f"rank {rank} ({sources['rank']}) is outside 0..{world_size - 1} (world size {world_size})")
    if not 0 <= local_rank < world_size:
        raise ValueError(f"local rank {local_rank} ({sources['local_rank']}) is outside 0..{world_size - 1}")
    addr, sources["master_addr"] = master_addr(environ, slurm=slurm)
    port, sources["master_port"] = master_port(environ, slurm=slurm)
    return RankEnv(
        rank=rank, local_rank=local_rank, world_size=world_size, master_addr=addr, master_port=port, sources=sources
    )


def visible_devices(environ: Mapping[str, str]) -> list[str] | None:
    """CUDA_VISIBLE_DEVICES as a list (Slurm's gres sets it for each step); None when unset."""
    value = environ.get("CUDA_VISIBLE_DEVICES")
    return None if value is None else [d.strip() for d in value.split(",") if d.strip()]


def device_slot(environ: Mapping[str, str], local_rank: int, count: int) -> int:
    """Which of the `count` CUDA devices this process sees is this rank's own: one device per rank.

    Where the node's ranks see the same devices (torchrun's workers share their agent's, the local
    executor's ranks share the machine's, a srun step without binding gives every task the node's),
    rank r on a node takes the r-th. A task srun started (RANK unset) that Slurm bound to a set of
    GPUs (--gpus-per-task, --gpu-bind=closest|single|per_task|map_gpu|mask_gpu) takes, among the
    devices it sees, the one at its local rank among the node's tasks given that same set
    (launcher/trials/slurm_gpus.py): 0 for a set of its own, the r-th for the r-th of a NUMA
    domain's tasks under `closest`."""
    slurm_task = "RANK" not in environ and "SLURM_PROCID" in environ
    slot = task_slot(environ, local_rank, count) if slurm_task else local_rank
    if slot >= count:
        shown = environ.get("CUDA_VISIBLE_DEVICES", "unset")
        shared = f", Slurm gave them to {slot} task(s) of lower local rank too," if slurm_task else ""
        raise ValueError(
            f"local rank {local_rank} has no CUDA device of its own: this process sees {count} "
            f"(CUDA_VISIBLE_DEVICES={shown}){shared} and ranks never share one; run at most {count} rank(s) per node "
            "(cluster.tasks_per_node / cluster.gpus_per_node, or run.world_size locally) or per GPU set "
            "(cluster.gpu_bind)"
        )
    return slot


def bound_gpu(environ: Mapping[str, str], local_rank: int) -> str | None:
    """The CUDA_VISIBLE_DEVICES entry this rank is bound to (the node's GPU as Slurm numbers it),
    also on a CPU trial with stand-in GPUs; None when nothing is visible for it."""
    visible = visible_devices(environ)
    if not visible:
        return None
    try:
        return visible[device_slot(environ, local_rank, len(visible))]
    except ValueError:
        return None


def attempt(environ: Mapping[str, str]) -> int:
    """This run's attempt: Slurm's restart count (0 on the first run, 1 after one requeue), else 0."""
    return int(environ.get("SLURM_RESTART_COUNT") or 0)


def read_int(environ: Mapping[str, str], name: str) -> int:
    try:
        return int(environ[name])
    except KeyError:
        raise ValueError(f"{name} is not set") from None
    except ValueError:
        raise ValueError(f"{name}={environ[name]!r} is not an integer") from None


def master_addr(environ: Mapping[str, str], *, slurm: bool) -> tuple[str, str]:
    """(address, where it came from)."""
    if environ.get("MASTER_ADDR"):
        return environ["MASTER_ADDR"], "MASTER_ADDR"
    if not slurm:
        return DEFAULT_ADDR, DEFAULT
    if not environ.get("SLURM_JOB_NODELIST"):
        raise ValueError("under Slurm without MASTER_ADDR, SLURM_JOB_NODELIST must name the job's hosts")
    return first_host(environ["SLURM_JOB_NODELIST"]), "SLURM_JOB_NODELIST"


def master_port(environ: Mapping[str, str], *, slurm: bool) -> tuple[int, str]:
    """(port, where it came from)."""
    if environ.get("MASTER_PORT"):
        port, source = read_int(environ, "MASTER_PORT"), "MASTER_PORT"
    elif slurm:
        port, source = SLURM_PORT_BASE + read_int(environ, "SLURM_JOB_ID") % SLURM_PORT_SPAN, "SLURM_JOB_ID"
    else:
        port, source = DEFAULT_PORT, DEFAULT
    if not 0 < port < 65536:
        raise ValueError(f"MASTER_PORT={port} is not a TCP port (1..65535)")
    return port, source


_FIRST_GROUP = re.compile(r"[^,\[\]]*(?:\[[^\]]*\][^,\[\]]*)*")


def first_host(nodelist: str) -> str:
    """The first host of a Slurm host list: "gpu-[003-004,010],cpu1" → "gpu-003" (each bracket
    range's first value, zero padding kept; what `scontrol show hostnames` would list first)."""
    group = _FIRST_GROUP.match(nodelist).group()  # type: ignore[union-attr]  # matches "" at worst
    if not group or (len(group) < len(nodelist) and nodelist[len(group)] != ","):
        raise ValueError(f"SLURM_JOB_NODELIST={nodelist!r} is not a Slurm host list")
    return re.sub(r"\[([^\]]*)\]", lambda m: re.split(r"[,-]", m.group(1))[0], group)
