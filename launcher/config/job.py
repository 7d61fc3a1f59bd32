"""The `job` group: what a trial runs. `builtin` is the launcher's own training loop (the model,
parallel, batch … groups say what it trains); `command` is your own training program, started
as `launch` says, its throughput read as `metrics` says (launcher/harvest).

A command's argv and env take values of the trial they run in, spelled `${trial.KEY}` (KEYS below;
`${batch.micro}`, `${batch.accum}`, `${batch.global_batch}`, `${parallel.tp}`, `${parallel.pp}` are
the trial's too, derived per size). They are kept as text when Hydra composes the config and
resolved per trial at plan time (launcher/trials/command.py); any other `${a.b}` naming a config
value is that value. A key that is neither stops the sweep before anything is created.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from launcher.config.choices import JobKind, JobLaunch, Metrics

TRIAL_KEYS = {
    "world_size": "ranks of the trial",
    "nodes": "nodes it spans",
    "gpus_per_node": "ranks per node (GPUs per node on a GPU cluster)",
    "micro": "samples per rank per micro-step",
    "accum": "micro-steps per optimizer step",
    "global_batch": "samples per optimizer step (micro × accum × dp)",
    "dp": "data-parallel degree",
    "tp": "tensor-parallel degree",
    "pp": "pipeline degree",
    "steps": "optimizer steps, warm-up included (sweep.steps)",
    "warmup_steps": "leading steps excluded from throughput (sweep.warmup_steps)",
    "dir": "the trial's folder (absolute)",
    "id": "the trial's id, e.g. 001-ws2",
    "repeat": "which repeat of its size",
}
"""`${trial.KEY}`: the values of the trial a command runs in."""

TRIAL_ALIASES = {
    "batch.micro": "micro",
    "batch.accum": "accum",
    "batch.global_batch": "global_batch",
    "parallel.tp": "tp",
    "parallel.pp": "pp",
}
"""Config keys whose value a trial derives (accumulation under a fixed global batch, the degrees
of a layout): in a command they take the trial's value, not the recipe's."""

REFERENCE = re.compile(r"(\\?)\$\{([^{}]*)\}")
"""`${key}` in a command's argv or env value; `\\${…}` stays literal text `${…}`."""


def config_value(config: Mapping[str, Any], key: str) -> str | None:
    """A scalar of the resolved config document at dotted `key`, as text; None when there is none."""
    node: Any = config
    for part in key.split("."):
        if not isinstance(node, Mapping) or part not in node:
            return None
        node = node[part]
    if isinstance(node, (Mapping, list)):
        return None
    return "null" if node is None else str(node).lower() if isinstance(node, bool) else str(node)


def unknown_key(where: str, text: str, key: str) -> str:
    """The one line for `${key}` in `where`=`text` naming neither a trial value nor a config value."""
    known = ", ".join(f"trial.{k}" for k in TRIAL_KEYS)
    return (
        f"{where}={text!r}: unknown interpolation key ${{{key}}}; a command takes ${{trial.KEY}} with KEY one of "
        f"{known}, the aliases {', '.join(TRIAL_ALIASES)}, or a config value such as ${{model.seq_len}}"
    )


REGEX_GROUPS = ("tokens_per_s", "tokens_per_s_per_gpu", "samples_per_s", "step_s")
"""The named groups a `metrics=regex` pattern may capture (one of them)."""


@dataclass(kw_only=True, frozen=True)
class JobConfig:
    name: str | None = None
    """The job's name in a sweep's folder and report: the `job` recipe chosen (`job=my_train` → my_train) when the
    recipe sets none. For the bundled generic `command` recipe, the program's file name (argv) names the sweep."""
    kind: JobKind = JobKind.builtin
    """`builtin`: the launcher's own training loop (model, parallel, batch … say what it trains). `command`: your own
    program (`argv`), started per trial as `launch` says; its throughput read as `metrics` says."""
    argv: list[str] = field(default_factory=list)
    """command: the program and its arguments, one word each (never parsed by a shell), e.g. [python, train.py,
    "--batch=${batch.micro}"]. `${trial.world_size}` and the other trial keys (launcher/config/job.py TRIAL_KEYS)
    take each trial's value; argv[0] `python` (or `python3`) is the launcher's interpreter (cluster.python on Slurm)."""
    launch: JobLaunch = JobLaunch.torchrun
    """command: `torchrun`: one agent per node spawns the ranks (locally `python -m torch.distributed.run
    --standalone`); `srun`: one task per rank, RANK/WORLD_SIZE/LOCAL_RANK/MASTER_ADDR/MASTER_PORT set (locally one
    process per rank); `none`: argv runs once, as it is, and starts its own ranks."""
    metrics: Metrics = Metrics.meter
    """command: where throughput comes from: `meter` (launcher.meter.step in your loop), `regex` (`pattern` on rank 0's
    output), `torchtitan` / `megatron` (their own log lines), `hf` / `lightning` (the launcher's callbacks)."""
    pattern: str | None = None
    """metrics=regex: a Python regex matched on rank 0's output, with a named group `tokens_per_s` (the whole job's),
    `tokens_per_s_per_gpu`, `samples_per_s` or `step_s`, e.g. 'tok/s: (?P<tokens_per_s>[0-9.]+)'; and `step`, the step
    number, where the line has it: the warm-up is then counted in steps (without it, a match is a step). A pattern
    that matches once (a summary line) is that figure (docs/own-command.md)."""
    tokens_per_sample: int | None = None
    """command: tokens in one sample, where the program counts samples or steps (samples_per_s, step_s, meter's
    samples=): tokens/s = samples/s × this. Null: such a count gives no tokens/s (the trial fails, saying so)."""
    flops_per_token: float | None = None
    """command: model FLOPs per token trained (≈ 6N + 12·L·H·Q·T); with a known device peak it gives the row's MFU.
    Null: MFU is null."""
    model_describes_program: bool = False
    """command: true when the recipe's model group (model=…, or model.* overrides) describes the program's own model:
    its FLOPs per token give MFU (where flops_per_token is null), its seq_len the tokens per sample (where
    tokens_per_sample is null), and its parameter count the gradient `launcher plan --from` all-reduces. False: the
    model group is the built-in trainer's only, and says nothing of the program."""
    env: dict[str, str] = field(default_factory=dict)
    """command: NAME → value for every rank (after cluster.env), `${trial.KEY}` resolved per trial; quoted data in a
    job script. LAUNCHER_METER_FILE is set by the launcher (the trial's meter.jsonl)."""
    signal: bool = False
    """command: true when your program handles SIGUSR1 (saves and exits, or requeues itself, as Lightning's
    auto-requeue does): on Slurm every rank then gets it cluster.signal_warning_s before the time limit
    (`--signal`), as under `launcher run --requeue`. False: no warning is sent (USR1's default action
    would kill a program that does not handle it, and its row would read `failed`); a program still
    running at the limit is stopped by Slurm and its row reads `timeout`."""
    probe: bool = True
    """command: before the program, time an all-reduce of `probe_bytes` on the trial's ranks (same nodes, same ranks):
    the row's busbw_gbps and allreduce_time_s, which `launcher plan --from` calibrates the links from."""
    probe_bytes: int = 64 * 2**20
    """command: bytes of the link probe's all-reduce (float32 elements × 4); 64 MiB by default."""


def job_label(job: JobConfig) -> str:
    """What a sweep of this job is called: its recipe's name (job.name), or, for the bundled generic `command`
    recipe (and a config stored before jobs had names), the program's file name: the first argv word naming a `.py`
    file, else the module after `-m`, else argv[0]. Characters a folder name should not hold become `_`."""
    if job.kind != "command":
        return "builtin"
    name = job.name if job.name and job.name != "command" else _program_name(job.argv)
    return re.sub(r"[^A-Za-z0-9._+-]", "_", name).strip("._-") or "command"


def _program_name(argv: Sequence[str]) -> str:
    words = [w for w in argv if "${" not in w]
    if script := next((w for w in words if w.endswith(".py")), None):
        return os.path.basename(script)
    if "-m" in argv[:-1]:
        return argv[argv.index("-m") + 1]
    return os.path.basename(argv[0]) if argv else "command"
