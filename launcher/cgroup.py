"""Which cgroup holds a process's `cpu` controller, and the CPU quota that cgroup imposes.

cgroup v1 (the hierarchy mounted with the `cpu` controller: `cpu.cfs_quota_us` ÷ `cpu.cfs_period_us`)
and v2 (the unified hierarchy when `cpu` is among its controllers: `cpu.max`). The machine's `cpu`
controller lives in one of them; v1 wins where it holds it, since then v2 cannot. The parsers take
the text of /proc/<pid>/cgroup and /proc/<pid>/mountinfo, and every file is read under `root`, so
the whole module is testable on literal contents in a tmp folder.

One home for this: the dev cluster uses it to place its nodes' cgroups, each rank to record the
quota it ran under (train/measure.py's cpu_contention).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

V2_DEFAULT_PERIOD_US = 100_000


@dataclass(kw_only=True, frozen=True)
class CpuHierarchy:
    """Where a process's `cpu` controller is, and its cgroup there."""

    version: int
    """1 (a v1 hierarchy mounted with the `cpu` controller) or 2 (the unified hierarchy)."""
    mount: Path
    """Where that hierarchy is mounted, e.g. /sys/fs/cgroup/cpu (not prefixed by a test's root)."""
    path: str
    """The process's cgroup, relative to the mount: "/" or "/launcher-devcluster/n1"."""

    def dir(self, root: Path = Path("/")) -> Path:
        """The cgroup's folder (under `root`, the filesystem's root outside tests)."""
        return _under(root, self.mount) / self.path.lstrip("/")


@dataclass(kw_only=True, frozen=True)
class CpuQuota:
    """The tightest CPU quota over a process's cgroup and its ancestors."""

    cpus: float | None
    """CPUs' worth of time per period the quota allows (0.45 = 45%); None: no quota."""
    group: str | None
    """The cgroup that sets it ("v1:/launcher-devcluster/n1"): processes in it share the quota;
    None when there is no quota."""


NO_QUOTA = CpuQuota(cpus=None, group=None)


def _under(root: Path, path: Path | str) -> Path:
    return root / str(path).lstrip("/")


def _unescape(field: str) -> str:
    # mountinfo writes space, tab, newline and backslash in paths as \040, \011, \012, \134.
    return re.sub(r"\\([0-7]{3})", lambda m: chr(int(m.group(1), 8)), field)


def mounts(mountinfo: str) -> list[tuple[str, str, str, set[str]]]:
    """(fstype, mount root, mount point, super options) of each cgroup/cgroup2 mount in mountinfo."""
    out = []
    for line in mountinfo.splitlines():
        fields = line.split()
        if "-" not in fields:
            continue
        sep = fields.index("-")
        if len(fields) < sep + 4 or fields[sep + 1] not in ("cgroup", "cgroup2"):
            continue
        out.append((fields[sep + 1], _unescape(fields[3]), _unescape(fields[4]), set(fields[sep + 3].split(","))))
    return out


def _relative(path: str, mount_root: str) -> str | None:
    """The cgroup path as seen below a mount whose root is `mount_root` (None: not below it)."""
    if mount_root == "/":
        return path
    if path == mount_root or path.startswith(mount_root.rstrip("/") + "/"):
        return path[len(mount_root.rstrip("/")) :] or "/"
    return None


def cpu_hierarchy(proc_cgroup: str, mountinfo: str, root: Path = Path("/")) -> CpuHierarchy | None:
    """The hierarchy holding the `cpu` controller for the process whose /proc/<pid>/cgroup and
    mountinfo these are; None when neither v1 nor v2 offers it (or it is not mounted)."""
    lines = [ln.split(":", 2) for ln in proc_cgroup.splitlines() if ln.count(":") >= 2]
    found = mounts(mountinfo)
    for _, controllers, path in lines:
        if "cpu" not in controllers.split(","):
            continue
        for fstype, mroot, point, opts in found:
            rel = _relative(path, mroot)
            if fstype == "cgroup" and "cpu" in opts and rel is not None:
                return CpuHierarchy(version=1, mount=Path(point), path=rel)
    for hid, controllers, path in lines:
        if hid != "0" or controllers:
            continue
        for fstype, mroot, point, _ in found:
            rel = _relative(path, mroot)
            offered = read_or_empty(_under(root, point) / "cgroup.controllers").split()
            if fstype == "cgroup2" and rel is not None and "cpu" in offered:
                return CpuHierarchy(version=2, mount=Path(point), path=rel)
    return None


def read_or_empty(path: Path) -> str:
    """A cgroup file's text, or "" where it is absent or unreadable (a controller not offered)."""
    try:
        return path.read_text()
    except OSError:
        return ""


def level_quota(folder: Path, version: int) -> float | None:
    """CPUs the quota of this one cgroup folder allows (None: unlimited, or unreadable)."""
    if version == 1:
        quota, period = (
            read_or_empty(folder / "cpu.cfs_quota_us").strip(),
            read_or_empty(folder / "cpu.cfs_period_us").strip(),
        )
        if not quota or not period or int(quota) < 0 or int(period) <= 0:
            return None
        return int(quota) / int(period)
    fields = read_or_empty(folder / "cpu.max").split()
    if not fields or fields[0] == "max":
        return None
    period = int(fields[1]) if len(fields) > 1 else V2_DEFAULT_PERIOD_US
    return int(fields[0]) / period


def quota_of(h: CpuHierarchy, root: Path = Path("/")) -> CpuQuota:
    """The tightest quota from the process's cgroup up to the hierarchy's top: any ancestor's
    quota bounds every cgroup below it, shared among them all."""
    best = NO_QUOTA
    parts = [p for p in h.path.split("/") if p]
    for depth in range(len(parts), -1, -1):
        rel = "/" + "/".join(parts[:depth])
        cpus = level_quota(_under(root, h.mount) / rel.lstrip("/"), h.version)
        if cpus is not None and (best.cpus is None or cpus < best.cpus):
            best = CpuQuota(cpus=round(cpus, 6), group=f"v{h.version}:{rel}")
    return best


def own_cpu_quota(root: Path = Path("/"), proc: Path = Path("/proc/self")) -> CpuQuota:
    """This process's CPU quota (NO_QUOTA where no cgroup sets one, or none can be read)."""
    h = cpu_hierarchy(
        read_or_empty(_under(root, proc) / "cgroup"), read_or_empty(_under(root, proc) / "mountinfo"), root
    )
    return NO_QUOTA if h is None else quota_of(h, root)
