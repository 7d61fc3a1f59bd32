"""What a trial runs: one description that every executor launches, whatever the payload.

`payload_for` is the one place that chooses it; the built-in trainer (`python -m launcher.train
--trial … --record …`) is today's only payload. A payload's argv holds three kinds of word, each
spelled by the executor its own way (`Payload.spell`):
- text, passed as it is (shell-quoted in a job script);
- PYTHON, the interpreter the executor runs Python with: the launcher's own locally; on Slurm
  cluster.python, else the `python` the setup lines put on PATH (launcher/slurm/render.py);
- TrialFile, a file in the trial's folder: a path locally, `"$dir/<name>"` in the job script, so
  one script serves every trial of an array or a pack.
Values that differ between trials (world size, batch) reach the payload through its trial folder
(trial.json holds the trial and its config), so trials that share a job share its payload.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from launcher.config.plain import to_dict
from launcher.config.schema import Launch, LauncherConfig
from launcher.trials.command import command_words
from launcher.trials.spec import Trial

# Spelled unquoted inside "$dir/…" in a job script, so only characters no shell treats specially.
_FILE_NAME = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9._-]*$")
_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
PYTHONS = ("python", "python3")
"""A command's argv[0] spelled so is the executor's interpreter (PYTHON): cluster.python on Slurm, the launcher's own
locally (where `python` on PATH may not be the environment that has torch)."""


@dataclass(kw_only=True, frozen=True)
class Python:
    """The word for the interpreter the executor runs Python with (use PYTHON)."""


PYTHON = Python()


@dataclass(kw_only=True, frozen=True)
class TrialFile:
    name: str
    """A file name inside the trial's folder: letters, digits and `._-`."""

    def __post_init__(self) -> None:
        if not _FILE_NAME.fullmatch(self.name):
            raise ValueError(f"TrialFile(name={self.name!r}): a trial file's name is letters, digits and ._- only")


Word = str | Python | TrialFile


@dataclass(kw_only=True, frozen=True)
class Payload:
    argv: tuple[Word, ...]
    """The program and its arguments. argv[0] is the interpreter: under torchrun launch the agent
    (itself `<python> -m torch.distributed.run`) is handed argv[1:] (`after_interpreter`)."""
    env: tuple[tuple[str, str], ...] = ()
    """(name, value) for every rank, after cluster.env; the rendezvous variables the executor sets win."""
    launch: str = Launch.srun
    """How ranks start on Slurm: `srun`, one task per rank, or `torchrun`, one agent per node that
    spawns them; a command also `none` (it starts its own ranks). Locally the launcher starts every
    rank of the built-in trainer itself as a process, whichever it says."""
    command: bool = False
    """The user's own program (job=command): started through launcher.trials.rank_exec, launched as
    `launch` says locally too, its record written after its ranks end (launcher/train/command_record.py)."""
    warning_signal: bool = True
    """Whether it asks for Slurm's USR1 before the time limit: the built-in trainer does (a
    checkpointing run saves and requeues on it; a sweep trial ignores it), a command as job.signal
    (or `launcher run --requeue`) says."""

    def __post_init__(self) -> None:
        if not self.argv:
            raise ValueError("a payload needs a program: argv is empty")
        bad = [name for name, _ in self.env if not _ENV_NAME.fullmatch(name)]
        if bad:
            raise ValueError(f"payload env name {bad[0]!r} is not a variable name (letters, digits, _)")

    @property
    def after_interpreter(self) -> tuple[Word, ...]:
        """What a torchrun agent runs with its own interpreter."""
        return self.argv[1:]

    def here(self, trial_dir: Path, python: str) -> list[str]:
        """argv for a process on this machine, for the trial in `trial_dir`."""
        return spell(self.argv, python=python, trial_file=lambda name: str(trial_dir / name))


def spell(
    words: Sequence[Word], *, python: str, trial_file: Callable[[str], str], text: Callable[[str], str] = str
) -> list[str]:
    """Each word as an executor writes it: PYTHON as `python`, a trial file by `trial_file(name)`,
    text by `text` (shlex.quote in a job script)."""
    out = []
    for word in words:
        if isinstance(word, Python):
            out.append(python)
        elif isinstance(word, TrialFile):
            out.append(trial_file(word.name))
        else:
            out.append(text(word))
    return out


def builtin_payload(*, launch: Launch = Launch.srun, extra_args: Sequence[str] = ()) -> Payload:
    """The launcher's own trainer; `extra_args` follow its own (tests add `--save-params PATH`)."""
    argv = (PYTHON, "-m", "launcher.train", "--trial", TrialFile(name="trial.json"), "--record")
    return Payload(argv=(*argv, TrialFile(name="record.json"), *extra_args), launch=launch)


def probe_payload(*, launch: str = Launch.srun) -> Payload:
    """A command trial's link probe (launcher/train/link_probe.py), on the ranks the command gets."""
    argv = (PYTHON, "-m", "launcher.train.link_probe", "--trial", TrialFile(name="trial.json"), "--out")
    return Payload(argv=(*argv, TrialFile(name="probe.json")), launch=launch if launch != "none" else Launch.srun)


def profile_payload(*, launch: str = Launch.srun) -> Payload:
    """`launcher profile`'s measurements (launcher/train/profile_node.py), one process per rank."""
    argv = (PYTHON, "-m", "launcher.train.profile_node", "--trial", TrialFile(name="trial.json"), "--out")
    return Payload(argv=(*argv, TrialFile(name="profile.json")), launch=launch, warning_signal=False)


def payload_for(
    cfg: LauncherConfig,
    extra_args: Sequence[str] = (),
    *,
    trial: Trial | None = None,
    trial_dir: Path | None = None,
) -> Payload:
    """What a trial of `cfg` runs: the one choice of payload. job=builtin: the built-in trainer,
    started as cluster.launch says, the same for every trial. job=command: the user's argv and env
    with `trial`'s values (in `trial_dir`), started as job.launch says."""
    if cfg.job.kind == "command":
        if trial is None or trial_dir is None:
            raise ValueError("a command's payload is per trial: give payload_for the trial and its folder")
        argv, env = command_words(cfg.job, trial, trial_dir, to_dict(cfg))
        words: list[Word] = [PYTHON if i == 0 and w in PYTHONS else w for i, w in enumerate(argv)]
        asks = cfg.job.signal or cfg.run.requeue  # for Slurm's USR1 before the time limit
        return Payload(argv=tuple(words), env=tuple(env), launch=str(cfg.job.launch), command=True, warning_signal=asks)
    return builtin_payload(launch=cfg.cluster.launch, extra_args=extra_args)
