"""A real container runtime in the dev cluster (`launcher cluster up --containers`): NVIDIA's pyxis
(the SPANK plugin behind `srun --container-image=...`) and enroot (the runtime pyxis drives), built
from the sources vendored in third_party/ against the cluster's own Slurm, and a small image to run
steps in: Debian bookworm with python3 and the host's CPU torch, and nothing of the launcher.

This module holds the paths, the config text (pure) and what the lead's code and the tests ask
(`image_path`, `image_info`, `enabled`); container_build does the building.

Everything lives in the cluster folder's containers/ (a cache: `down` keeps it; it is rebuilt only
when the vendored sources, Slurm's spank.h or the host's torch change). Nothing is written to the
system's /etc/slurm, /etc/enroot or /usr/local: slurm.conf names <cluster>/etc/plugstack.conf, which
loads pyxis, and the nodes' slurmd (so every slurmstepd, whose PATH pyxis keeps) has enroot's bin
folder on its PATH.

Enroot's data, runtime, cache and temp folders are one per node (`$(hostname)` in its config, which
enroot evaluates; each node has its own hostname): the dev cluster's nodes share one disk where
real nodes have their own, and pyxis gives a step's container the same name on every node.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path

from launcher.slurm.devcluster.conf import DEFAULT_ROOT, Layout

THIRD_PARTY = Path(__file__).resolve().parents[3] / "third_party"
"""The vendored sources (a checkout's top folder; an installed wheel has none)."""
IMAGE_FILE = "bookworm-python-torch.sqsh"
IMAGE_RECIPE = 3
"""Bumped when the image's recipe changes (suite, packages, compression): the cached image is rebuilt."""
IMAGE_MARKER = "/etc/launcher-devcluster-image.json"
"""A file inside the image (its "built" stamp and recipe, as in the record beside it): a step that reads it
runs in this image."""
SUITE = "bookworm"
IMAGE_PACKAGES = ("python3", "python-is-python3")
"""Debian packages debootstrap adds to minbase (`python` as well as `python3`, as site images have);
torch (and numpy, so torch's import is quiet) come from the host's pip, torchrun to /usr/local/bin."""
SQUASH_OPTIONS = ("-comp", "lz4", "-all-root", "-noappend", "-no-progress", "-quiet")
"""lz4: 1.2 GB of rootfs squashed in ~3 s and unsquashed in ~1.5 s here (zstd's default level took 114 s)."""
ABSENT = ("launcher", "hydra", "omegaconf")
"""Modules the image must not have: the job side needs only torch and the standard library."""
PYXIS_ARGS = ("container_scope=job", "use_squashfuse=true")
"""container_scope=job: a named container (`--container-name`) belongs to one job: pyxis names it
pyxis_<jobid>_<name> and its job epilog removes it. use_squashfuse=true: a step without a name starts
on the image mounted in place (squashfuse, overlay) in ~0.5 s, where pyxis' default unpacked the
1.2 GB root filesystem for every step (12-80 s measured here, 2 cores) and removed it after. A named
container is still unpacked once per job and node (~15-35 s), then reused by the job's later steps."""
SAFE_PATH = re.compile(r"^/[A-Za-z0-9._/+-]*$")


@dataclass(kw_only=True, frozen=True)
class ContainerLayout:
    """Where the container runtime of one cluster folder lives."""

    layout: Layout
    """The cluster's own layout (its etc/ holds plugstack.conf)."""

    @property
    def base(self) -> Path:
        return self.layout.root / "containers"

    @property
    def build(self) -> Path:
        """Copies of third_party/enroot and third_party/pyxis, built in place."""
        return self.base / "build"

    @property
    def enroot_prefix(self) -> Path:
        return self.base / "enroot"

    @property
    def enroot_bin(self) -> Path:
        return self.enroot_prefix / "bin"

    @property
    def enroot_sysconf(self) -> Path:
        """`make install sysconfdir=<prefix>/etc` puts enroot's files in <prefix>/etc/enroot."""
        return self.enroot_prefix / "etc" / "enroot"

    @property
    def enroot_dropin(self) -> Path:
        return self.enroot_sysconf / "enroot.conf.d" / "devcluster.conf"

    @property
    def pyxis_prefix(self) -> Path:
        return self.base / "pyxis"

    @property
    def plugin(self) -> Path:
        return self.pyxis_prefix / "lib" / "slurm" / "spank_pyxis.so"

    @property
    def runtime_stamp(self) -> Path:
        """What the installed runtime was built from (`runtime_record`)."""
        return self.base / "runtime.json"

    @property
    def var(self) -> Path:
        """Enroot's per-node folders (var/<node>/data, ...) and pyxis' runtime folder (var/pyxis)."""
        return self.base / "var"

    @property
    def pyxis_runtime(self) -> Path:
        return self.var / "pyxis"

    @property
    def images(self) -> Path:
        return self.base / "images"

    @property
    def image(self) -> Path:
        return self.images / IMAGE_FILE

    @property
    def image_json(self) -> Path:
        return self.image.with_suffix(".json")

    @property
    def plugstack(self) -> Path:
        return self.layout.etc / "plugstack.conf"

    def data(self, node: str) -> Path:
        """Enroot's containers (unpacked root filesystems) on `node`."""
        return self.var / node / "data"


def container_layout(root: Path | str = DEFAULT_ROOT) -> ContainerLayout:
    return ContainerLayout(layout=Layout(root=Path(root)))


def check_root(root: Path) -> None:
    """Enroot's config values are evaluated by bash and make's arguments split on spaces: the cluster
    folder must be a plain absolute path."""
    if not SAFE_PATH.match(str(root)):
        raise ValueError(
            f"--containers needs a cluster folder path of letters, digits and ._+-/ only "
            f"(enroot's config and make take it unquoted): {str(root)!r}"
        )


# ---------------------------------------------------------------- config text (pure)


def plugstack_text(cl: ContainerLayout) -> str:
    """<cluster>/etc/plugstack.conf: pyxis, required (a node that cannot load it fails its steps
    rather than running them outside the image)."""
    return (
        "# Written by launcher.slurm.devcluster (`launcher cluster up --containers`); edits are overwritten.\n"
        f"required {cl.plugin} runtime_path={cl.pyxis_runtime} {' '.join(PYXIS_ARGS)}\n"
    )


def enroot_conf_text(cl: ContainerLayout) -> str:
    """The enroot.conf.d drop-in: per-node folders in the cluster's cache (enroot evaluates the values
    in bash, so `$(hostname)` is the node's name inside a job). pyxis drops a job's ENROOT_*_PATH
    variables, so these hold in every step."""
    per_node = f"{cl.var}/$(hostname)"
    return (
        "# Written by launcher.slurm.devcluster (`launcher cluster up --containers`); edits are overwritten.\n"
        f"ENROOT_RUNTIME_PATH {per_node}/runtime\n"
        f"ENROOT_CACHE_PATH {per_node}/cache\n"
        f"ENROOT_DATA_PATH {per_node}/data\n"
        f"ENROOT_TEMP_PATH {per_node}/tmp\n"
        f"ENROOT_SQUASH_OPTIONS {' '.join(SQUASH_OPTIONS[:2])}\n"
        "ENROOT_MOUNT_HOME no\n"
    )


def daemon_path(cl: ContainerLayout, base_path: str) -> str:
    """The daemons' PATH with enroot's bin folder first: pyxis runs `enroot` from slurmstepd's PATH."""
    return f"{cl.enroot_bin}:{base_path}"


# ---------------------------------------------------------------- parsers (pure)


def mirror_of(sources: list[str]) -> str | None:
    """The first Debian mirror (main component) in apt's sources: one-line `deb URI SUITE COMPONENTS`
    lists and deb822 `.sources` stanzas alike. `sources`: the files' texts."""
    for text in sources:
        for line in text.splitlines():
            words = line.split("#", 1)[0].split()
            if words[:1] == ["deb"]:
                words = [w for w in words[1:] if not w.startswith("[")]  # [signed-by=...] options
                if len(words) >= 3 and "main" in words[2:] and "security" not in words[1]:
                    return words[0].rstrip("/")
        for stanza in re.split(r"\n\s*\n", text):
            fields = _deb822(stanza)
            if "deb" in fields.get("types", "").split() and "main" in fields.get("components", "").split():
                suites = fields.get("suites", "").split()
                if suites and not all("security" in s for s in suites):
                    uris = fields.get("uris", "").split()
                    if uris:
                        return uris[0].rstrip("/")
    return None


def _deb822(stanza: str) -> dict[str, str]:
    fields: dict[str, str] = {}
    for line in stanza.splitlines():
        if line.strip().startswith("#") or ":" not in line or line[:1].isspace():
            continue
        key, value = line.split(":", 1)
        fields[key.strip().lower()] = value.strip()
    return fields


def slurm_version(version_h: str) -> str | None:
    """The release /usr/include/slurm/slurm_version.h is of: its SLURM_VERSION_STRING, or (Debian's
    header has only the number) SLURM_VERSION_NUMBER 0x160508 → "22.05.8"."""
    m = re.search(r'#define\s+SLURM_VERSION_STRING\s+"([^"]+)"', version_h)
    if m:
        return m.group(1)
    m = re.search(r"#define\s+SLURM_VERSION_NUMBER\s+0x([0-9a-fA-F]+)", version_h)
    if not m:
        return None
    n = int(m.group(1), 16)
    return f"{n >> 16 & 0xFF:02d}.{n >> 8 & 0xFF:02d}.{n & 0xFF}"


def makefile_version(makefile: str, variable: str) -> str | None:
    """A version a Makefile sets (`VERSION := 4.1.2`, `PYXIS_VER ?= 0.24.0`)."""
    m = re.search(rf"^{re.escape(variable)}\s*[:?]?=\s*(\S+)\s*$", makefile, re.M)
    return m.group(1) if m else None


# ---------------------------------------------------------------- asking the cache


def _read_json(path: Path) -> dict | None:
    try:
        d = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    return d if isinstance(d, dict) else None


def runtime_record(cl: ContainerLayout) -> dict | None:
    """What the installed runtime was built from: {"digest", "slurm", "pyxis", "enroot"}; None if unbuilt."""
    rec = _read_json(cl.runtime_stamp)
    if rec is None or not cl.plugin.exists() or not (cl.enroot_bin / "enroot").exists():
        return None
    return rec


def image_path(root: Path | str = DEFAULT_ROOT) -> Path:
    """The dev cluster's container image (a squashfs file, as `srun --container-image=PATH` takes it).
    It exists once `launcher cluster up --containers` has run; `image_info` says what is in it."""
    return container_layout(root).image


def image_info(root: Path | str = DEFAULT_ROOT) -> dict | None:
    """The record beside the image, read from inside it when it was built: {"image", "os", "os_id",
    "os_version_id", "python", "torch", "numpy", "absent", "built", "size_bytes", "build_s", "recipe"};
    None when there is no image. IMAGE_MARKER inside the image holds its "built" and "recipe"."""
    cl = container_layout(root)
    info = _read_json(cl.image_json)
    return info if info is not None and cl.image.exists() else None


def enabled(root: Path | str = DEFAULT_ROOT) -> bool:
    """True when the cluster's last `up` enabled containers and its slurm.conf loads pyxis (whether
    the cluster is running: `launcher.slurm.devcluster.current`)."""
    cl = container_layout(root)
    try:
        conf_text = cl.layout.slurm_conf.read_text()
    except OSError:
        return False
    return f"PlugStackConfig={cl.plugstack}" in conf_text.splitlines() and runtime_record(cl) is not None


def describe(cl: ContainerLayout, on: bool) -> list[str]:
    """`launcher cluster status` lines."""
    if not on:
        return ["containers: off (`launcher cluster up --containers` adds pyxis + enroot and an image)"]
    rec = runtime_record(cl) or {}
    info = image_info(cl.layout.root)
    out = [
        f"containers: on: pyxis {rec.get('pyxis', '?')} + enroot {rec.get('enroot', '?')} "
        f"(built against Slurm {rec.get('slurm', '?')}), {cl.plugstack}"
    ]
    if info is None:
        out.append(f"image: MISSING ({cl.image}); `launcher cluster up --containers` builds it")
    else:
        out.append(
            f"image: {cl.image} ({info.get('os')}, python {info.get('python')}, torch {info.get('torch')}); "
            f"srun --container-image={cl.image}"
        )
    return out
