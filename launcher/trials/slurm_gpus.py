"""Which of the GPUs a Slurm task sees is its own: its local rank among the tasks of its node that
Slurm gave the same set (env.device_slot's rule for a task srun started, RANK unset).

A task sees only its own CUDA_VISIBLE_DEVICES, never the other tasks', so the tasks that share its
set are worked out from what Slurm leaves in every task's environment: the binding the job asked
for (SLURM_GPU_BIND, from `#SBATCH --gpu-bind`; SLURM_GPUS_PER_TASK, from `--gpus-per-task`), the
node's GPUs in the step (SLURM_GPUS_ON_NODE) and the socket-level task distribution
(SLURM_DISTRIBUTION). Tested against the variables the dev cluster's Slurm 22.05 sets
(tests/unit/test_gpu_sets.py). Standard library only: it runs on the node, before a command's rank
(launcher.trials.rank_exec) and in the built-in trainer's (launcher.train.env), and sits below both.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping


def task_slot(environ: Mapping[str, str], local_rank: int, seen: int) -> int:
    """Index, among the `seen` GPUs this task sees, of its own: how many tasks of lower local rank
    were given the same set (they take the devices before it). Every task sees the node's GPUs:
    its local rank; a set of its own: 0."""
    key = _set_key(environ, seen)
    mine = key(local_rank)
    return sum(1 for other in range(local_rank) if key(other) == mine)


def _set_key(environ: Mapping[str, str], seen: int) -> Callable[[int], object]:
    """A function of a local rank that is equal for two tasks exactly when Slurm gave them one set."""
    bind = environ.get("SLURM_GPU_BIND", "").removeprefix("verbose,")
    form, _, value = bind.partition(":")
    if form in ("map_gpu", "mask_gpu"):
        # Slurm's rule: the task of local rank r gets entry r % n (map: a GPU index; mask: a bit mask).
        entries = _expand(value, 10 if form == "map_gpu" else 16)
        return lambda r: entries[r % len(entries)]
    if form == "single" and value.isdigit() and int(value) > 0:
        return lambda r: r // int(value)  # the first N tasks on the first GPU, the next N on the next
    own = form == "per_task" or (bool(environ.get("SLURM_GPUS_PER_TASK")) and form != "closest")
    on_node = environ.get("SLURM_GPUS_ON_NODE", "")
    sets = int(on_node) // seen if on_node.isdigit() and seen else None
    if own or (seen == 1 and (not form or sets is None)):
        return lambda r: r  # each task its own GPUs
    if sets is not None and (form == "closest" or sets > 1):
        return _numa_key(environ, max(sets, 1))
    return lambda r: 0  # every task sees the node's GPUs (or nothing tells them apart)


def _numa_key(environ: Mapping[str, str], sets: int) -> Callable[[int], object]:
    """--gpu-bind=closest: a task sees the GPUs of its socket's NUMA domain, and which socket each
    task is on follows the distribution's second level: cyclic by default (task r on socket
    r % sockets), block when SLURM_DISTRIBUTION says `*:block` (the first tasks fill the first socket)."""
    levels = environ.get("SLURM_DISTRIBUTION", "").split(",")[0].split(":")
    if len(levels) > 1 and levels[1] == "block":
        tasks = _tasks_on_node(environ)
        per_set = -(-tasks // sets) if tasks else 1
        return lambda r: r // per_set
    return lambda r: r % sets


def _expand(value: str, base: int) -> list[int]:
    """map_gpu/mask_gpu entries, a `*N` repeating one N times: "0x3*2,0xc" → [3, 3, 12]."""
    entries = []
    for item in value.split(","):
        word, _, times = item.partition("*")
        entries += [int(word, base)] * (int(times) if times.isdigit() else 1)
    return entries or [0]


def _tasks_on_node(environ: Mapping[str, str]) -> int | None:
    """This node's tasks in the step: SLURM_STEP_TASKS_PER_NODE (or SLURM_TASKS_PER_NODE), in
    Slurm's `2(x3),1` form, at this node's index (SLURM_NODEID)."""
    counts: list[int] = []
    for item in (environ.get("SLURM_STEP_TASKS_PER_NODE") or environ.get("SLURM_TASKS_PER_NODE") or "").split(","):
        count, _, repeat = item.rstrip(")").partition("(x")
        if count.isdigit():
            counts += [int(count)] * (int(repeat) if repeat.isdigit() else 1)
    node = int(environ.get("SLURM_NODEID", "0") or 0)
    return counts[node] if node < len(counts) else (counts[-1] if counts else None)
