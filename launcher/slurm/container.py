"""Every step on a node inside the site's container image: pyxis (enroot) or Apptainer. Pure.

An image brings Python and the site's torch, nothing of ours. So that both payloads (the built-in
trainer and a command trial's probe and record) run in it, each step gets three mounts besides
the user's own (cluster.container_mounts): the launcher's package, read-only, at
LAUNCHER_MOUNT/launcher (PYTHONPATH names LAUNCHER_MOUNT; the package alone, never the
site-packages around it, whose torch would shadow the image's); the sweep folder, where ranks
write; and the submit folder, where steps start (a command's relative paths, `python train.py`,
mean what they meant when it was submitted). The interpreter is the image's `python3` unless
cluster.python names another (render.payload_python).
"""

from __future__ import annotations

import shlex
from dataclasses import dataclass
from pathlib import Path

from launcher.config.errors import ConfigError
from launcher.config.schema import ClusterConfig

LAUNCHER_MOUNT = "/opt/launcher"
"""Where the launcher's package is mounted in the image (as LAUNCHER_MOUNT/launcher); on PYTHONPATH."""
IMAGE_PYTHON = "python3"
"""The interpreter in an image when cluster.python is null: NGC's, Debian's and most images' name."""


@dataclass(kw_only=True, frozen=True)
class Container:
    runtime: str
    """`pyxis` or `apptainer` (cluster.container_runtime)."""
    image: str
    """The image (cluster.container_image)."""
    mounts: tuple[str, ...]
    """`src:dst[:flags]` each: the launcher's three, then the user's."""
    workdir: str
    """The submit folder: every step starts there."""
    gpus: bool = False
    """The job asks for GPUs: Apptainer's `--nv` (pyxis brings them through enroot's hooks itself)."""
    reuse: bool = False
    """pyxis: the job's steps share one named container per node (cluster.container_reuse, or requeue)."""

    @property
    def words(self) -> str:
        """The step's words, quoted: pyxis's srun options, or Apptainer's command prefix. Either
        way they stand right before what the step runs, so one place in the template serves both."""
        q = shlex.quote
        if self.runtime == "apptainer":
            words = ["apptainer", "exec", *(["--nv"] if self.gpus else [])]
            return " ".join(map(q, [*words, "--bind", ",".join(self.mounts), "--pwd", self.workdir, self.image]))
        # The job id expands when the step runs: a name unique to the job even where pyxis keeps
        # containers beyond one (container_scope=global).
        name = ' --container-name=launcher_"$SLURM_JOB_ID"' if self.reuse else ""
        return (
            f"--container-image={q(self.image)} --container-mounts={q(','.join(self.mounts))} "
            f"--container-workdir={q(self.workdir)}{name}"
        )


def container_for(
    cluster: ClusterConfig, *, submit_dir: Path, sweep_dir: Path, launcher_src: Path, gpus: bool, requeue: bool
) -> Container | None:
    """The container every step of a job runs in; None without cluster.container_image. A job that
    checkpoints on USR1 and requeues names its container even without cluster.container_reuse: on
    the dev cluster, where pyxis mounts the image with squashfuse, `scancel --signal=USR1` left the
    running ranks' root file system stale ("Stale file handle" on every path) before they could
    save; a named container is unpacked, with no FUSE process for the signal to reach."""
    if cluster.container_image is None:
        return None
    for what, path in (("submit folder", submit_dir), ("sweep folder", sweep_dir), ("launcher package", launcher_src)):
        _check_mountable(what, path)
    own = [f"{launcher_src}:{LAUNCHER_MOUNT}/launcher:ro", f"{submit_dir}:{submit_dir}"]
    if not sweep_dir.is_relative_to(submit_dir):  # inside the submit folder it is mounted already
        own.append(f"{sweep_dir}:{sweep_dir}")
    return Container(
        runtime=str(cluster.container_runtime),
        image=cluster.container_image,
        mounts=tuple(dict.fromkeys([*own, *cluster.container_mounts])),
        workdir=str(submit_dir),
        gpus=gpus,
        reuse=cluster.container_reuse or requeue,
    )


def _check_mountable(what: str, path: Path) -> None:
    text = str(path)
    if not path.is_absolute() or path == Path(path.anchor):
        raise ConfigError(
            f"the {what} {text!r} cannot be mounted into cluster.container_image (the whole file system would "
            "cover the image's own); submit from a project folder"
        )
    if "," in text or ":" in text:
        raise ConfigError(
            f"the {what} {text!r} holds ',' or ':', which separate the container runtime's mounts; "
            "use a folder whose path has neither"
        )
