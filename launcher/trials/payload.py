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

from launcher.config.schema import Launch, LauncherConfig

# Spelled unquoted inside "$dir/…" in a job script, so only characters no shell treats specially.
_FILE_NAME = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9._-]*$")
_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


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
    launch: Launch = Launch.srun
    """How ranks start on Slurm: `srun`, one task per rank, or `torchrun`, one agent per node that
    spawns them. Locally the launcher starts every rank itself as a process, whichever it says."""

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


def payload_for(cfg: LauncherConfig, extra_args: Sequence[str] = ()) -> Payload:
    """What the trials of `cfg` run: the one choice of payload (today always the built-in trainer,
    started as cluster.launch says)."""
    return builtin_payload(launch=cfg.cluster.launch, extra_args=extra_args)
