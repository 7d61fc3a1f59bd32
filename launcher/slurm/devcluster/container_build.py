"""Building the dev cluster's container runtime and image into its cache (containers.py says where and
why): the Debian packages they need, enroot and pyxis from third_party/ (`make install` into the
cache), and the image (debootstrap, the host's pip, mksquashfs). Each step is skipped when its
record says the cache is current."""

from __future__ import annotations

import datetime
import hashlib
import importlib.metadata
import json
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

from launcher.slurm.devcluster import containers as ct
from launcher.slurm.devcluster import install
from launcher.slurm.devcluster.containers import ContainerLayout
from launcher.slurm.devcluster.errors import DevClusterError
from launcher.slurm.devcluster.install import SEARCH_PATH, apt_install

SPANK_H = Path("/usr/include/slurm/spank.h")
SLURM_VERSION_H = Path("/usr/include/slurm/slurm_version.h")
# What must be there, and the Debian package that brings it. Build: a C toolchain, Slurm's spank.h
# (pyxis must be built against the running Slurm's release), libbsd (enroot's helpers, see
# third_party/enroot/README.md), makeself. Run: unsquashfs (`enroot create`), squashfuse and
# fuse-overlayfs (pyxis' use_squashfuse, `enroot start x.sqsh`), and the tools enroot's scripts check
# for. Image: debootstrap, mksquashfs.
PROGRAMS = {
    "gcc": "gcc",
    "make": "make",
    "makeself": "makeself",
    "mksquashfs": "squashfs-tools",
    "unsquashfs": "squashfs-tools",
    "squashfuse": "squashfuse",
    "fuse-overlayfs": "fuse-overlayfs",
    "debootstrap": "debootstrap",
    "column": "bsdextrautils",
    "lsns": "util-linux",
    "ps": "procps",
    "flock": "util-linux",
}
FILES = {
    SPANK_H: "libslurm-dev",
    Path("/usr/include/bsd/string.h"): "libbsd-dev",
    Path("/usr/include/stdio.h"): "libc6-dev",
}
IMAGE_TIMEOUT_S = 1800


def missing() -> dict[str, str]:
    """{what is missing: its package}."""
    out = {p: pkg for p, pkg in PROGRAMS.items() if shutil.which(p, path=SEARCH_PATH) is None}
    out |= {str(f): pkg for f, pkg in FILES.items() if not f.exists()}
    return out


def ensure_packages(log: Callable[[str], None], log_file: Path) -> bool:
    gone = missing()
    if not gone:
        return False
    packages = sorted(set(gone.values()))
    log(f"installing Debian packages for containers ({', '.join(packages)})")
    apt_install(packages, log_file)
    still = missing()
    if still:
        raise DevClusterError(f"installed {' '.join(packages)} but {', '.join(still)} still missing; see {log_file}")
    return True


def _run(argv: list[str], log_file: Path, what: str, timeout: float = 600, env: dict[str, str] | None = None) -> None:
    with open(log_file, "ab") as out:
        out.write(f"\n=== {argv}\n".encode())
        out.flush()
        try:
            rc = subprocess.run(
                argv,
                env=env,
                check=False,
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                timeout=timeout,
            ).returncode
        except subprocess.TimeoutExpired:
            rc = 124
    if rc != 0:
        raise DevClusterError(f"{what} failed (`{' '.join(argv[:3])} ...` exited {rc}); see {log_file}")


# ---------------------------------------------------------------- enroot and pyxis


def sources() -> Path:
    if not (ct.THIRD_PARTY / "pyxis" / "Makefile").exists() or not (ct.THIRD_PARTY / "enroot" / "Makefile").exists():
        raise DevClusterError(
            f"--containers builds pyxis and enroot from {ct.THIRD_PARTY}, which is missing (a checkout has it)"
        )
    return ct.THIRD_PARTY


def _digest(src: Path) -> str:
    """Of the vendored sources, the Slurm header pyxis compiles against and this build's recipe."""
    h = hashlib.sha256()
    for sub in ("enroot", "pyxis"):
        for f in sorted(p for p in (src / sub).rglob("*") if p.is_file()):
            h.update(str(f.relative_to(src)).encode() + b"\0" + f.read_bytes() + b"\0")
    h.update(SPANK_H.read_bytes())
    h.update(SLURM_VERSION_H.read_bytes())
    return h.hexdigest()


def want_runtime() -> dict:
    src = sources()
    return {
        "digest": _digest(src),
        "slurm": ct.slurm_version(SLURM_VERSION_H.read_text()) or "?",
        "pyxis": ct.makefile_version((src / "pyxis" / "Makefile").read_text(), "PYXIS_VER") or "?",
        "enroot": ct.makefile_version((src / "enroot" / "Makefile").read_text(), "VERSION") or "?",
    }


def ensure_runtime_current(cl: ContainerLayout) -> bool:
    return ct.runtime_record(cl) == want_runtime()


def ensure_runtime(cl: ContainerLayout, log: Callable[[str], None], log_file: Path) -> bool:
    """Build and install enroot and pyxis into the cache unless the installed ones were built from the
    same sources against the same Slurm. Returns True if it built."""
    want = want_runtime()
    if ct.runtime_record(cl) == want:
        _write_config(cl)
        return False
    t0 = time.monotonic()
    log(f"building enroot {want['enroot']} and pyxis {want['pyxis']} (Slurm {want['slurm']}) into {cl.base}")
    cl.runtime_stamp.unlink(missing_ok=True)
    for d in (cl.build, cl.enroot_prefix, cl.pyxis_prefix):
        shutil.rmtree(d, ignore_errors=True)
    src = sources()
    for sub in ("enroot", "pyxis"):
        shutil.copytree(src / sub, cl.build / sub)
    make = shutil.which("make", path=SEARCH_PATH) or "make"
    enroot = [f"prefix={cl.enroot_prefix}", f"sysconfdir={cl.enroot_prefix / 'etc'}"]
    _run([make, "-C", str(cl.build / "enroot"), "install", *enroot], log_file, "building enroot")
    # Slurm's job epilog has no PATH: pyxis sets this one there (third_party/pyxis/README.md).
    fallback = ct.daemon_path(cl, install.DAEMON_PATH)
    env = dict(os.environ, CPPFLAGS=f"-DPYXIS_EPILOG_PATH='\"{fallback}\"'")
    pyxis = [make, "-C", str(cl.build / "pyxis"), "install", f"prefix={cl.pyxis_prefix}"]
    _run(pyxis, log_file, "building pyxis", env=env)
    _write_config(cl)
    cl.runtime_stamp.write_text(json.dumps(want, indent=1) + "\n")
    log(f"enroot and pyxis built in {time.monotonic() - t0:.1f} s")
    return True


def _write_config(cl: ContainerLayout) -> None:
    cl.enroot_dropin.parent.mkdir(parents=True, exist_ok=True)
    text = ct.enroot_conf_text(cl)
    if not cl.enroot_dropin.exists() or cl.enroot_dropin.read_text() != text:
        cl.enroot_dropin.write_text(text)
    cl.pyxis_runtime.mkdir(parents=True, exist_ok=True)


# ---------------------------------------------------------------- the image


def host_versions() -> dict[str, str]:
    """The host's torch (and numpy, if any): the image gets the same."""
    out = {}
    for dist in ("torch", "numpy"):
        try:
            out[dist] = importlib.metadata.version(dist)
        except importlib.metadata.PackageNotFoundError:
            if dist == "torch":
                raise DevClusterError(
                    "--containers puts the host's torch into the image, and this Python has none "
                    "(pip install -e '.[cpu]')"
                ) from None
    return out


def image_current(cl: ContainerLayout, want: dict[str, str]) -> bool:
    info = ct.image_info(cl.layout.root)
    return info is not None and info.get("recipe") == ct.IMAGE_RECIPE and all(info.get(k) == v for k, v in want.items())


def mirror() -> str:
    texts = []
    for f in [Path("/etc/apt/sources.list"), *sorted(Path("/etc/apt/sources.list.d").glob("*"))]:
        if f.is_file() and f.suffix in (".list", ".sources", ""):
            texts.append(f.read_text(errors="replace"))
    m = ct.mirror_of(texts)
    if m is None:
        raise DevClusterError("no Debian mirror with `main` in /etc/apt/sources.list*: debootstrap needs one")
    return m


def ensure_image(cl: ContainerLayout, log: Callable[[str], None], log_file: Path) -> bool:
    """Build the image unless the cached one has the host's torch and this recipe. Returns True if it built."""
    want = host_versions()
    if image_current(cl, want):
        return False
    t0 = time.monotonic()
    log(f"building the container image {cl.image} (Debian {ct.SUITE}, python3, torch {want['torch']}; a minute or two)")
    cl.images.mkdir(parents=True, exist_ok=True)
    rootfs = cl.images / "rootfs.tmp"
    shutil.rmtree(rootfs, ignore_errors=True)
    debootstrap = [
        shutil.which("debootstrap", path=SEARCH_PATH) or "debootstrap",
        "--variant=minbase",
        f"--include={','.join(ct.IMAGE_PACKAGES)}",
        ct.SUITE,
        str(rootfs),
        mirror(),
    ]
    _run(debootstrap, log_file, "debootstrap", timeout=IMAGE_TIMEOUT_S)
    _pip_into(rootfs, want, log_file)
    _trim(rootfs)
    info = _inspect(rootfs, log_file)
    bad = [m for m in ct.ABSENT if m not in info["absent"]]
    if bad or info.get("torch") != want["torch"]:
        raise DevClusterError(f"the image's rootfs has {bad} or torch {info.get('torch')} != {want['torch']}")
    info["built"] = datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")
    marker = {"built": info["built"], "recipe": ct.IMAGE_RECIPE}
    (rootfs / ct.IMAGE_MARKER.lstrip("/")).write_text(json.dumps(marker) + "\n")
    tmp = cl.image.with_suffix(".sqsh.tmp")
    tmp.unlink(missing_ok=True)
    mksquashfs = shutil.which("mksquashfs", path=SEARCH_PATH) or "mksquashfs"
    _run([mksquashfs, str(rootfs), str(tmp), *ct.SQUASH_OPTIONS], log_file, "mksquashfs", timeout=IMAGE_TIMEOUT_S)
    tmp.replace(cl.image)
    shutil.rmtree(rootfs, ignore_errors=True)
    info |= {
        "image": str(cl.image),
        "size_bytes": cl.image.stat().st_size,
        "build_s": round(time.monotonic() - t0, 1),
        "recipe": ct.IMAGE_RECIPE,
    }
    cl.image_json.write_text(json.dumps(info, indent=1, sort_keys=True) + "\n")
    log(f"image built in {info['build_s']} s: {cl.image} ({info['size_bytes'] / 1e6:.0f} MB)")
    return True


def _image_python(rootfs: Path) -> str:
    """The version the image's /usr/bin/python3 links to ("3.11" for bookworm)."""
    return os.readlink(rootfs / "usr" / "bin" / "python3").removeprefix("python")


def _pip_into(rootfs: Path, want: dict[str, str], log_file: Path) -> None:
    """The host's pip (its index and /opt/wheels) installs torch (and numpy) into the image's
    /usr/local dist-packages; console scripts (torchrun) go to /usr/local/bin for the image's python."""
    py = _image_python(rootfs)
    site = rootfs / "usr" / "local" / "lib" / f"python{py}" / "dist-packages"
    argv = [sys.executable, "-m", "pip", "install", "--quiet", "--no-input", "--target", str(site)]
    if py != f"{sys.version_info.major}.{sys.version_info.minor}":
        argv += ["--python-version", py, "--only-binary=:all:"]
    argv += [f"{dist}=={version}" for dist, version in sorted(want.items())]
    _run(argv, log_file, "pip install into the image", timeout=IMAGE_TIMEOUT_S)
    scripts = site / "bin"
    if scripts.is_dir():
        dest = rootfs / "usr" / "local" / "bin"
        dest.mkdir(parents=True, exist_ok=True)
        for s in scripts.iterdir():
            lines = s.read_text().split("\n", 1)
            if lines[0].startswith("#!"):  # pip wrote the host's interpreter there
                lines[0] = "#!/usr/bin/python3"
            (dest / s.name).write_text("\n".join(lines))
            (dest / s.name).chmod(0o755)
        shutil.rmtree(scripts)


def _trim(rootfs: Path) -> None:
    for sub in ("var/cache/apt", "var/lib/apt/lists", "usr/share/doc", "usr/share/man", "usr/share/info"):
        d = rootfs / sub
        if d.is_dir():
            for child in d.iterdir():
                if child.is_dir() and not child.is_symlink():
                    shutil.rmtree(child)
                else:
                    child.unlink()


INSPECT = """
import importlib.util, json, sys
import torch
try:
    import numpy
except ImportError:
    numpy = None
osr = dict(l.split("=", 1) for l in open("/etc/os-release").read().splitlines() if "=" in l)
print(json.dumps({
    "os": osr["PRETTY_NAME"].strip('"'), "os_id": osr["ID"], "os_version_id": osr["VERSION_ID"].strip('"'),
    "python": sys.version.split()[0], "torch": torch.__version__, "numpy": numpy and numpy.__version__,
    "absent": sorted(m for m in sys.argv[1:] if importlib.util.find_spec(m) is None),
}))
"""


def _inspect(rootfs: Path, log_file: Path) -> dict:
    """What is in the rootfs, asked of its own python (chrooted, a clean environment)."""
    argv = [shutil.which("chroot", path=SEARCH_PATH) or "chroot", str(rootfs), "/usr/bin/python3", "-I", "-c"]
    r = subprocess.run(
        [*argv, INSPECT, *ct.ABSENT],
        check=False,
        capture_output=True,
        text=True,
        env={"PATH": "/usr/local/bin:/usr/bin:/bin", "LANG": "C.UTF-8", "HOME": "/root"},
        timeout=300,
        stdin=subprocess.DEVNULL,
    )
    with open(log_file, "a") as out:
        out.write(f"\n=== inspect {rootfs}\n{r.stdout}{r.stderr}")
    if r.returncode != 0:
        raise DevClusterError(f"the image's python failed to report its versions (exit {r.returncode}); see {log_file}")
    return json.loads(r.stdout.strip().splitlines()[-1])


def current(cl: ContainerLayout) -> bool:
    """The cached runtime was built from today's sources against this Slurm and the image has the host's
    torch (cheap: a digest of third_party/ and two small files)."""
    try:
        return ensure_runtime_current(cl) and image_current(cl, host_versions())
    except (DevClusterError, OSError):
        return False


def ensure(cl: ContainerLayout, log: Callable[[str], None], log_file: Path) -> bool:
    """Packages, runtime and image: each only if missing or stale. True if the runtime was (re)built:
    the nodes' slurmd must restart to load the new plugin."""
    ct.check_root(cl.layout.root)
    ensure_packages(log, log_file)
    built = ensure_runtime(cl, log, log_file)
    ensure_image(cl, log, log_file)
    return built
