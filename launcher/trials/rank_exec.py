"""`python -m launcher.trials.rank_exec LOG ARGV…`: how each rank of a command starts.

It fills the torchrun-style variables from Slurm's (srun launch: one task per rank, where Slurm
sets only SLURM_PROCID/SLURM_LOCALID/SLURM_NTASKS), gives USR1 back its default action (the job
script makes torchrun's agent ignore it, and an ignored signal would stay ignored in every rank
it spawns: Slurm's warning must reach your program, as it would without the launcher), sends the
rank's output to LOG (`{rank}` in it becomes the global rank: rank 0's text is where the
throughput readers look; `-`: leave the output where it goes), then becomes ARGV (exec: the same
process, its exit status the rank's). LOG comes first and is never an option (`-x`): torchrun's
parser takes any option word right after the program it runs (`-m launcher.trials.rank_exec`) as its own.
Under srun, where Slurm bound GPUs to each task (cluster.gpus_per_task, cluster.gpu_bind), a task
sees only its own set, so LOCAL_RANK is the index of the task's GPU among those it sees (0 for a GPU
of its own; launcher/trials/slurm_gpus.py, the rule the built-in trainer follows): a program that
takes `cuda:{LOCAL_RANK}` gets its own GPU. SLURM_LOCALID keeps the task's place on the node.
No launcher import beyond launcher.trials.slurm_gpus (standard library only): it runs before every
rank of the user's program.
"""

from __future__ import annotations

import os
import signal
import sys

from launcher.trials.slurm_gpus import task_slot

# torchrun-style variable ← Slurm's, for a task srun started.
_FROM_SLURM = {"RANK": "SLURM_PROCID", "LOCAL_RANK": "SLURM_LOCALID", "WORLD_SIZE": "SLURM_NTASKS"}


def rank_environ(environ: dict[str, str]) -> dict[str, str]:
    """`environ` with RANK, LOCAL_RANK, WORLD_SIZE (and LOCAL_WORLD_SIZE) filled from Slurm's where unset."""
    out = dict(environ)
    if "RANK" not in out and "SLURM_PROCID" in out:
        slot = _bound_slot(environ)  # read before RANK is set: device_slot tells a task srun started by it
        out.update({k: out[v] for k, v in _FROM_SLURM.items() if v in out})
        if slot is not None:
            out["LOCAL_RANK"] = str(slot)
        per_node = out.get("SLURM_NTASKS_PER_NODE", "").split("(")[0]
        if per_node.isdigit():
            out.setdefault("LOCAL_WORLD_SIZE", per_node)
    return out


def _bound_slot(environ: dict[str, str]) -> int | None:
    """The task's own GPU among those it sees (the rule launcher.train.env.device_slot applies); None
    where it sees none, or none is its own (more tasks than GPUs: the program's own start-up says so)."""
    visible = [d for d in environ.get("CUDA_VISIBLE_DEVICES", "").split(",") if d.strip()]
    local = environ.get("SLURM_LOCALID", "")
    if not visible or not local.isdigit():
        return None
    try:
        slot = task_slot(environ, int(local), len(visible))
    except ValueError:  # a binding Slurm would not have run with (a malformed mask)
        return None
    return slot if slot < len(visible) else None


NO_LOG = "-"


def split_args(args: list[str]) -> tuple[str | None, list[str]]:
    """(LOG or None, ARGV) from this module's arguments."""
    if len(args) < 2:
        raise SystemExit("usage: python -m launcher.trials.rank_exec LOG|- ARGV...")
    return (None if args[0] == NO_LOG else args[0]), args[1:]


def main(args: list[str]) -> None:
    log, argv = split_args(args)
    env = rank_environ(dict(os.environ))
    signal.signal(signal.SIGUSR1, signal.SIG_DFL)
    if log is not None:
        fd = os.open(log.replace("{rank}", env.get("RANK", "0")), os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        os.dup2(fd, 1)
        os.dup2(fd, 2)
        os.close(fd)
    try:
        os.execvpe(argv[0], argv, env)
    except OSError as exc:
        print(f"launcher: cannot run {argv[0]!r}: {exc.strerror}", file=sys.stderr, flush=True)
        raise SystemExit(127) from None


if __name__ == "__main__":
    main(sys.argv[1:])
