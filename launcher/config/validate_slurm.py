"""Checks of what a Slurm job script carries: names and expressions on #SBATCH lines, the
user's setup and sbatch lines, the node shape, the interpreter and exported variables."""

from __future__ import annotations

import re

from launcher.config.checks import at_least, check_sizes, short
from launcher.config.cluster_traits import cluster_traits
from launcher.config.derived import ranks_per_node
from launcher.config.errors import ConfigError
from launcher.config.schema import ClusterConfig

# Values that land on #SBATCH lines, which sbatch tokenises itself (no shell quoting there):
# only characters Slurm's own names and expressions use are accepted.
# Names and expressions start with a name character, '[' or '(' (not '-', which reads as an option);
# numbers are ASCII digits of bounded length (Python's \d also matches other scripts' digits).
_SLURM_NAME = re.compile(r"^[A-Za-z0-9_.+][A-Za-z0-9_.+-]{0,63}$")
_SLURM_CONSTRAINT = re.compile(r"^[A-Za-z0-9_\[(][A-Za-z0-9_.&|,()\[\]*:!-]{0,199}$")
_SLURM_TIME = re.compile(r"^([0-9]{1,4}-)?[0-9]{1,8}(:[0-9]{1,2}){0,2}$")
_SLURM_MEM = re.compile(r"^[0-9]{1,12}[KMGT]?$")
# --gpu-bind's forms (srun(1)), optionally after `verbose,`: no spaces or shell characters.
_GPU_BIND = re.compile(
    r"^(verbose,)?(closest|none|single:[0-9]{1,3}|per_task:[0-9]{1,3}|(map|mask)_gpu:[0-9a-fx,*]{1,200})$"
)
_SBATCH_OPTION = re.compile(r"^--[a-z][a-z0-9-]*(=[A-Za-z0-9_.,:=@%/+*-]+)?$")
# Control characters (newline, CR, NUL, …) in a container image or mount: no image or path has them.
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")
# pyxis mount flags, joined by '+' (`ro+rprivate`); ',' separates mounts and ':' the parts of one.
_MOUNT_FLAGS = re.compile(r"^[a-z]+(\+[a-z]+)*$")


def check_slurm(c: ClusterConfig, *, command: bool = False) -> None:
    """Values a Slurm job script carries (checked on every kind of cluster: `run --dry-run` renders one).
    `command`: job=command, whose ranks start as job.launch says, not cluster.launch."""
    _check_slurm_values(c)
    _check_script_lines(c)
    _check_node_shape(c)
    _check_binding(c)
    _check_gpu_binding(c, command=command)
    _check_container(c)
    if c.python is not None and (
        "\n" in c.python or "\x00" in c.python or not c.python.strip() or c.python.startswith("-")
    ):
        raise ConfigError(
            f"cluster.python={short(c.python)} must be one interpreter path or name (no newline or NUL, not "
            "starting with '-', which srun reads as an option); set e.g. cluster.python=/opt/venv/bin/python"
        )


def _check_slurm_values(c: ClusterConfig) -> None:
    """Names and expressions on #SBATCH lines."""
    for key, value, example in (
        ("cluster.partition", c.partition, "gpu"),
        ("cluster.account", c.account, "myproject"),
        ("cluster.qos", c.qos, "normal"),
    ):
        if value is not None and not _SLURM_NAME.fullmatch(value):
            raise ConfigError(
                f"{key}={value!r} is not a Slurm name (letters, digits, '_', '.', '+', '-', not first; ≤64); "
                f"set e.g. {key}={example}"
            )
    if c.constraint is not None and not _SLURM_CONSTRAINT.fullmatch(c.constraint):
        raise ConfigError(
            f"cluster.constraint={c.constraint!r} is not a Slurm feature expression (features joined by & | , "
            "with [ ] ( ) * :, starting with a feature); set e.g. cluster.constraint=a100"
        )
    if not _SLURM_TIME.fullmatch(c.time_limit):
        raise ConfigError(
            f"cluster.time_limit={c.time_limit!r} is not a Slurm time ([D-]HH:MM:SS, HH:MM or minutes); "
            "set e.g. cluster.time_limit=01:00:00"
        )
    if c.mem is not None and not _SLURM_MEM.fullmatch(c.mem):
        raise ConfigError(
            f"cluster.mem={c.mem!r} is not a Slurm memory size (number with K/M/G/T); set e.g. cluster.mem=64G"
        )


def _check_script_lines(c: ClusterConfig) -> None:
    """Extra #SBATCH options, environment variables and setup lines."""
    for opt in c.sbatch_extra:
        if not _SBATCH_OPTION.fullmatch(opt):
            raise ConfigError(
                f"cluster.sbatch_extra holds {opt!r}, not one --option[=value] without spaces, quotes or shell "
                "characters; write e.g. cluster.sbatch_extra=['--mail-type=END']"
            )
    env_pairs(c.env)
    for line in c.setup:
        if "\x00" in line:
            raise ConfigError("cluster.setup holds a NUL character; setup lines are shell code, one line per item")
        if "\r\n" in line or line.endswith("\r"):
            raise ConfigError(
                f"cluster.setup holds {short(line)}, with a CR-LF (DOS) line break that sbatch refuses in a script; "
                "remove the \\r"
            )


def _check_container(c: ClusterConfig) -> None:
    """pyxis/enroot's image and bind mounts: each becomes one shell-quoted srun word."""
    image = c.container_image
    if image is not None and (not image.strip() or _CONTROL.search(image)):
        raise ConfigError(
            f"cluster.container_image={short(image)} must be one image name or .sqsh path, not blank and without "
            "newlines or other control characters; set e.g. cluster.container_image=nvcr.io#nvidia/pytorch:24.05-py3"
        )
    if c.container_mounts and image is None:
        raise ConfigError(
            f"cluster.container_mounts holds {len(c.container_mounts)} mount(s) but cluster.container_image is "
            "null: mounts go into a container; set cluster.container_image too"
        )
    for mount in c.container_mounts:
        if problem := _mount_problem(mount, str(c.container_runtime)):
            raise ConfigError(
                f"cluster.container_mounts holds {short(mount)}: {problem}; write each as src:dst[:flags], "
                "e.g. cluster.container_mounts=['/scratch:/scratch:ro']"
            )


def _mount_problem(mount: str, runtime: str) -> str | None:
    if _CONTROL.search(mount):
        return "it has a newline or another control character"
    if "," in mount:
        return "',' separates mounts in pyxis's --container-mounts, so no path may hold one (one mount per item)"
    parts = mount.split(":")
    if len(parts) not in (2, 3):
        return f"{len(parts)} ':'-separated part(s), not 2 (src:dst) or 3 (src:dst:flags)"
    if not all(p.startswith("/") for p in parts[:2]):
        return "src and dst must be absolute paths (start with '/')"
    if len(parts) == 3 and runtime == "apptainer" and parts[2] not in ("ro", "rw"):
        return f"flags {parts[2]!r} are not Apptainer's bind options (ro or rw)"
    if len(parts) == 3 and not _MOUNT_FLAGS.fullmatch(parts[2]):
        return f"flags {parts[2]!r} are not pyxis mount flags joined by '+' (e.g. ro, ro+rprivate)"
    return None


def _check_node_shape(c: ClusterConfig) -> None:
    """Nodes, GPUs, tasks and CPUs of a job, and its signal warning."""
    at_least("cluster.nodes", c.nodes, 1, 1)
    check_sizes("cluster.nodes", [c.nodes])
    at_least("cluster.gpus_per_node", c.gpus_per_node, 0, 8)
    if c.tasks_per_node is not None:
        at_least("cluster.tasks_per_node", c.tasks_per_node, 1, 1)
    at_least("cluster.cpus_per_task", c.cpus_per_task, 1, 1)
    # Past any node that exists: refused here, not by sbatch after the sweep folder exists.
    for key, value, most in (
        ("cluster.gpus_per_node", c.gpus_per_node, 64),
        ("cluster.tasks_per_node", c.tasks_per_node or 1, 4096),
        ("cluster.cpus_per_task", c.cpus_per_task, 4096),
    ):
        if value > most:
            raise ConfigError(
                f"{key}={value} is more than any node has (at most {most}); set it to what one node holds"
            )
    at_least("cluster.signal_warning_s", c.signal_warning_s, 0, 120)
    if c.signal_warning_s > 65535:
        raise ConfigError(
            f"cluster.signal_warning_s={c.signal_warning_s} is over 65535 s, the most Slurm's --signal takes; "
            "set e.g. cluster.signal_warning_s=120"
        )


def _check_binding(c: ClusterConfig) -> None:
    """Each rank's threads fit the CPUs Slurm gives it, and a CUDA rank has a GPU of its own."""
    # Locally cpus_per_task binds nothing (every rank shares this machine), so only Slurm is checked.
    if not cluster_traits(c).ranks_here and c.threads_per_rank > c.cpus_per_task:
        raise ConfigError(
            f"cluster.threads_per_rank={c.threads_per_rank} is more than cluster.cpus_per_task={c.cpus_per_task}, "
            f"so each rank's threads would share its CPUs; set cluster.cpus_per_task={c.threads_per_rank} "
            f"(or cluster.threads_per_rank={c.cpus_per_task})"
        )
    ranks = ranks_per_node(c)
    if c.device == "cuda" and 0 < c.gpus_per_node < ranks:
        raise ConfigError(
            f"cluster.tasks_per_node={ranks} ranks would share cluster.gpus_per_node={c.gpus_per_node} GPUs: "
            f"one rank per GPU; set cluster.tasks_per_node={c.gpus_per_node} (or null: one per GPU)"
        )


def _check_gpu_binding(c: ClusterConfig, *, command: bool) -> None:
    """cluster.gpus_per_task and cluster.gpu_bind: Slurm's own forms; the built-in trainer on srun launch (one
    task per rank). A command's launch binds right on either: under torchrun the agent's step asks for the
    node's GPUs (sbatch_templates/command_step.j2), under srun LOCAL_RANK indexes what the task sees
    (launcher/trials/rank_exec.py); job.launch=none starts its own steps, which inherit the job's binding."""
    if c.gpus_per_task is not None:
        at_least("cluster.gpus_per_task", c.gpus_per_task, 1, 1)
    if c.gpu_bind is not None and not _GPU_BIND.fullmatch(c.gpu_bind):
        raise ConfigError(
            f"cluster.gpu_bind={c.gpu_bind!r} is not a --gpu-bind form (closest, none, single:N, per_task:N, "
            "map_gpu:IDS, mask_gpu:MASKS); set e.g. cluster.gpu_bind=single:1"
        )
    if (c.gpus_per_task is not None or c.gpu_bind is not None) and c.launch != "srun" and not command:
        raise ConfigError(
            f"cluster.gpus_per_task / cluster.gpu_bind bind GPUs to each task, but cluster.launch={c.launch} runs "
            "one task per node; set cluster.launch=srun"
        )


_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,127}$")
# Set by the launcher or Slurm for each rank; a user value would break the rendezvous.
_ENV_RESERVED = re.compile(
    r"^(MASTER_ADDR|MASTER_PORT|RANK|WORLD_SIZE|LOCAL_RANK|LOCAL_WORLD_SIZE|SLURM_.*|"
    r"OMP_NUM_THREADS|MKL_NUM_THREADS)$"
)
_ENV_SECRET = re.compile(r"(TOKEN|SECRET|PASSWORD|PASSWD|API_?KEY|ACCESS_?KEY|CREDENTIAL|PRIVATE_?KEY)", re.IGNORECASE)


def env_pairs(items: list[str]) -> list[tuple[str, str]]:
    """cluster.env items → (name, value), in order; ConfigError on the first bad one. A value is data
    but for `${NAME}`, expanded in the job after the setup lines (render.env_word)."""
    pairs = []
    for item in items:
        name, sep, value = item.partition("=")
        if not sep or not _ENV_NAME.fullmatch(name):
            raise ConfigError(
                f"cluster.env holds {item[:80]!r}, not NAME=value with NAME a shell variable name; "
                "write e.g. cluster.env=['NCCL_DEBUG=WARN']"
            )
        if _ENV_RESERVED.fullmatch(name):
            raise ConfigError(
                f"cluster.env sets {name}, which the launcher sets for each rank; remove it from cluster.env"
            )
        if _ENV_SECRET.search(name):
            raise ConfigError(
                f"cluster.env sets {name}, which looks like a secret, and the script is a file others may read; "
                "export it in the shell you submit from (sbatch passes your environment to the job)"
            )
        if "\x00" in value or len(value) > 4096:
            raise ConfigError(f"cluster.env value of {name} has a NUL character or is over 4096 characters; shorten it")
        if "\r\n" in value:
            raise ConfigError(
                f"cluster.env value of {name} holds a CR-LF (DOS) line break, which sbatch refuses in a script; "
                "use \\n line breaks"
            )
        pairs.append((name, value))
    return pairs
