"""Pure rendering: a typed job request → sbatch script text. No I/O beyond reading templates.

Values on `#SBATCH` lines were checked against Slurm's own character sets by config
validation (sbatch tokenises those lines itself, without a shell); every value in the script
body is shell-quoted with shlex.quote. Only `cluster.setup` lines run verbatim: they are the
user's own shell code. A `cluster.env` value is quoted in parts: its `${NAME}` references
become `"${NAME-}"` (expanded when the job runs), everything else is a single-quoted literal.
"""

from __future__ import annotations

import contextlib
import re
import shlex
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

import jinja2

from launcher import __version__
from launcher.config.derived import ranks_per_node
from launcher.config.errors import ConfigError
from launcher.config.recipe_folders import bundled
from launcher.config.schema import ClusterConfig
from launcher.config.validate_slurm import env_pairs
from launcher.slurm.container import IMAGE_PYTHON, LAUNCHER_MOUNT, Container, container_for
from launcher.train.env import SLURM_PORT_BASE, SLURM_PORT_SPAN
from launcher.trials.payload import Payload, Word, spell
from launcher.trials.spec import Trial

TEMPLATES = bundled("sbatch_templates")  # in the package when installed, else the top-level folder
# Paths that appear on #SBATCH lines (the batch log): sbatch does not shell-parse them.
_SBATCH_PATH = re.compile(r"^[A-Za-z0-9_./+=,@%-]+$")
# The one thing a cluster.env value may ask bash to expand: `${NAME}` with NAME a variable name.
ENV_REFERENCE = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}")
# cluster.python unset, after setup lines: the `python` those lines put on PATH.
PATH_PYTHON = "python"


@dataclass(kw_only=True, frozen=True)
class TrialStep:
    dir: str
    """Absolute trial folder (holds trial.json; receives logs and record.json)."""
    nodes: int
    """Nodes this trial's step spans."""
    argv: tuple[Word, ...] = ()
    """job=command: this trial's command line (its own: trials of one job may differ), quoted in the script."""
    env: tuple[tuple[str, str], ...] = ()
    """job=command: this trial's variables (LAUNCHER_METER_FILE among them), quoted in the script."""


@dataclass(kw_only=True, frozen=True)
class JobRequest:
    description: str
    """One line saying what the job is (a comment in the script)."""
    job_name: str
    """`--job-name`; a sweep's jobs share it so `singleton` can serialise them."""
    nodes: int
    """Nodes allocated."""
    ntasks_per_node: int
    """Ranks per node (srun launch) — torchrun launch spawns this many per node itself."""
    cpus_per_task: int
    """CPUs per rank."""
    gpus_per_node: int
    """GPUs per node; 0 → no --gres line."""
    gpus_per_task: int | None = None
    """`--gpus-per-task` (job and srun step) in place of the --gres line."""
    gpu_bind: str | None = None
    """`--gpu-bind=` (job and srun step)."""
    partition: str | None = None
    """`--partition`."""
    account: str | None = None
    """`--account`."""
    qos: str | None = None
    """`--qos`."""
    time_limit: str
    """`--time`."""
    mem: str | None = None
    """`--mem`."""
    constraint: str | None = None
    """`--constraint`."""
    exclusive: bool = False
    """`--exclusive`."""
    sbatch_extra: tuple[str, ...] = ()
    """Extra #SBATCH options."""
    setup: tuple[str, ...] = ()
    """User's shell lines, verbatim."""
    python: str
    """Interpreter on the nodes: runs the payload (srun) or torchrun's module and so every rank (torchrun)."""
    threads_per_rank: int = 1
    """OMP/MKL threads per rank."""
    signal_warning_s: int | None = 120
    """USR1 this many seconds before the time limit; None: no warning (the payload does not ask for it)."""
    output: str
    """Batch log path pattern (%j, %A, %a expand)."""
    trials: tuple[TrialStep, ...]
    """One trial (plain job), several of one shape (array), or several steps (pack)."""
    array: bool = False
    """Job array: task i runs trials[i]."""
    array_throttle: int | None = None
    """Array: `%K` on `--array`, at most K tasks running at once (1 with singleton); None where it would not bind."""
    pack: bool = False
    """One allocation, trials run one after another as job steps."""
    singleton: bool = False
    """`--dependency=singleton`."""
    payload: Payload
    """What each rank runs (launcher/trials/payload.py), and how its ranks start."""
    env: tuple[tuple[str, str], ...] = ()
    """(name, value) exported for every rank, after the setup lines; values are quoted (env_word)."""
    requeue: bool = False
    """`--requeue`, and requeue the job when the payload checkpointed on USR1 (its marker file)."""
    container: Container | None = None
    """The image every step on a node runs in (probe, ranks or torchrun's agents, record); None: none."""
    probe: Payload | None = None
    """job=command: the link probe each trial runs on its ranks before the command (None: job.probe=false)."""

    @property
    def gpu_step_options(self) -> str:
        """The srun step's GPU binding options, quoted ("" when none)."""
        opts = [f"--gpus-per-task={self.gpus_per_task}"] if self.gpus_per_task else []
        opts += [f"--gpu-bind={self.gpu_bind}"] if self.gpu_bind else []
        return " ".join(map(shlex.quote, opts))

    @property
    def agent_gpu_options(self) -> str:
        """torchrun's step under per-task binding (cluster.gpus_per_task / gpu_bind), quoted ("" when none): a
        step inherits the job's binding, which would leave the agent's one task per node one task's GPUs
        and ranks 1.. none; it asks for the node's GPUs instead (the job's binding variables unset)."""
        if not (self.gpus_per_task or self.gpu_bind):
            return ""
        gpus = self.gpus_per_task * self.ntasks_per_node if self.gpus_per_task else self.gpus_per_node
        return f"--gres=gpu:{gpus}" if gpus else ""

    @property
    def container_image(self) -> str | None:
        return self.container.image if self.container else None

    @property
    def launch(self) -> str:
        """srun | torchrun: the payload's."""
        return self.payload.launch


class _KeptTemplates(jinja2.FileSystemBytecodeCache):
    """The templates' compiled code kept between runs (jinja's per-user 0700 folder in the temp dir, checked
    against each template's text): compiling them cost ~30 ms of every submission (issue 30 item 11). A cache
    that cannot be read or written is only a cache missed."""

    def load_bytecode(self, bucket: jinja2.bccache.Bucket) -> None:
        with contextlib.suppress(OSError):
            super().load_bytecode(bucket)

    def dump_bytecode(self, bucket: jinja2.bccache.Bucket) -> None:
        with contextlib.suppress(OSError):
            super().dump_bytecode(bucket)


def _kept_templates() -> jinja2.BytecodeCache | None:
    try:
        return _KeptTemplates()
    except (OSError, RuntimeError):  # no safe temp folder of this user's: compile each time
        return None


@lru_cache(maxsize=1)
def _environment() -> jinja2.Environment:
    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(str(TEMPLATES)),
        bytecode_cache=_kept_templates(),
        undefined=jinja2.StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
        keep_trailing_newline=True,
        autoescape=False,  # shell, not HTML: quoting is the `q` filter's job
    )
    env.filters["q"] = lambda value: shlex.quote(str(value))
    env.filters["env_word"] = env_word
    env.filters["words"] = shell_words
    return env


def shell_words(words: tuple[Word, ...], python: str) -> str:
    """A payload's words on a job script's line: text and the interpreter shell-quoted, a trial
    file in the step's trial folder."""
    return " ".join(spell(words, python=shlex.quote(python), trial_file=_in_step_dir, text=shlex.quote))


def _in_step_dir(name: str) -> str:
    """`"$dir/<name>"`: run_trial's `dir` is the step's trial folder (a TrialFile name needs no quoting)."""
    return f'"$dir/{name}"'


def env_word(value: str) -> str:
    """A cluster.env value as one bash word: each `${NAME}` becomes `"${NAME-}"`, expanded when the
    job runs (after the setup lines; unset → empty, as the script runs under `set -u`); every other
    part is a shlex-quoted literal, so `$(…)`, backticks, `$NAME`, globs and quotes stay data."""
    parts, at = [], 0
    for m in ENV_REFERENCE.finditer(value):
        if m.start() > at:
            parts.append(shlex.quote(value[at : m.start()]))
        parts.append(f'"${{{m.group(1)}-}}"')
        at = m.end()
    if at < len(value) or not parts:
        parts.append(shlex.quote(value[at:]))
    return "".join(parts)


def payload_python(cluster: ClusterConfig, submitting: str) -> str:
    """The interpreter on the nodes: cluster.python when set; else the image's `python3` in a
    container; else, after setup lines (module load, venv or conda activation), `python` from the
    PATH they leave; else the submitting interpreter (`submitting`: nodes that share this
    filesystem, such as the dev cluster)."""
    if cluster.python is not None:
        return cluster.python
    if cluster.container_image is not None:
        return IMAGE_PYTHON
    return PATH_PYTHON if cluster.setup else submitting


def render_script(request: JobRequest) -> str:
    """The sbatch script for `request`: a pure function of it."""
    return (
        _environment()
        .get_template("trial.sbatch.j2")
        .render(
            r=request,
            version=__version__,
            port_base=SLURM_PORT_BASE,
            port_span=SLURM_PORT_SPAN,
            launcher_mount=LAUNCHER_MOUNT,
        )
    )


@dataclass(kw_only=True, frozen=True)
class Where:
    """The folders a job's container mounts (launcher/slurm/container.py)."""

    submit_dir: Path
    """The folder `launcher` was run from: steps start there."""
    sweep_dir: Path
    """The sweep's folder: trials write there."""
    launcher_src: Path
    """The launcher's package folder (holds __init__.py), mounted read-only."""


def check_sbatch_path(path: str, what: str) -> None:
    if not _SBATCH_PATH.fullmatch(path):
        raise ConfigError(
            f"{what} {path!r} has characters an #SBATCH line cannot carry (spaces, quotes, shell characters); "
            "choose sweep.results_dir without them"
        )


def job_request(
    cluster: ClusterConfig,
    trials: list[Trial],
    trial_dirs: list[Path],
    *,
    job_name: str,
    log_dir: Path,
    python: str,
    payload: Payload,
    pack: bool = False,
    throttle: int = 0,
    requeue: bool = False,
    commands: list[Payload] | None = None,
    probe: Payload | None = None,
    where: Where | None = None,
) -> JobRequest:
    """One job for `trials`: a single trial, an array of one shape (`throttle` of its tasks at once; 0:
    all; 1 under cluster.serialize_trials), or (pack) steps of one allocation. `python` is the
    submitting interpreter, used only as payload_python says. job=command: `commands` holds each
    trial's own payload (`payload` is the first's), `probe` the link probe. `where`: the folders a
    container mounts (needed with cluster.container_image)."""
    if cluster.container_image is not None and where is None:
        raise ValueError("a job in a container needs `where`: the folders it mounts")
    if not trials:
        raise ValueError("a job needs at least one trial")
    shapes = {(t.nodes, t.world_size) for t in trials}
    if not pack and len(shapes) > 1:
        raise ValueError(f"an array job needs trials of one shape, got (nodes, world size) {sorted(shapes)}")
    output = str(log_dir / ("slurm-%A_%a.out" if len(trials) > 1 and not pack else "slurm-%j.out"))
    check_sbatch_path(output, "the batch log path")
    kinds = "pack" if pack else ("array" if len(trials) > 1 else "trial")
    throttle = 1 if cluster.serialize_trials else throttle
    return JobRequest(
        description=f"{kinds} of {len(trials)} trial(s): " + ", ".join(t.trial_id for t in trials),
        job_name=job_name,
        nodes=max(t.nodes for t in trials),
        ntasks_per_node=ranks_per_node(cluster),
        cpus_per_task=cluster.cpus_per_task,
        gpus_per_node=cluster.gpus_per_node,
        gpus_per_task=cluster.gpus_per_task,
        gpu_bind=cluster.gpu_bind,
        partition=cluster.partition,
        account=cluster.account,
        qos=cluster.qos,
        time_limit=cluster.time_limit,
        mem=cluster.mem,
        constraint=cluster.constraint,
        exclusive=cluster.exclusive,
        sbatch_extra=tuple(cluster.sbatch_extra),
        setup=tuple(cluster.setup),
        python=payload_python(cluster, python),
        threads_per_rank=cluster.threads_per_rank,
        signal_warning_s=cluster.signal_warning_s if payload.warning_signal else None,
        output=output,
        trials=tuple(
            TrialStep(dir=str(d), nodes=t.nodes, argv=c.argv if c else (), env=c.env if c else ())
            for t, d, c in zip(trials, trial_dirs, commands or [None] * len(trials), strict=True)
        ),
        array=not pack and len(trials) > 1,
        array_throttle=throttle if kinds == "array" and 0 < throttle < len(trials) else None,
        pack=pack,
        singleton=cluster.serialize_trials,
        payload=payload,
        env=tuple(env_pairs(cluster.env)),
        requeue=requeue,
        container=where
        and container_for(
            cluster,
            submit_dir=where.submit_dir,
            sweep_dir=where.sweep_dir,
            launcher_src=where.launcher_src,
            gpus=bool(cluster.gpus_per_node or cluster.gpus_per_task),
            requeue=requeue,
        ),
        probe=probe,
    )
