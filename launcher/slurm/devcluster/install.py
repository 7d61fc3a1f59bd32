"""Install the Debian packages the dev cluster runs on, if any program is missing."""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Callable
from pathlib import Path

PACKAGES = ("slurmctld", "slurmd", "slurm-client", "munge", "slurmdbd", "mariadb-server", "mariadb-client")

# A program from each package (and the tools for namespaces) whose absence means "install".
PROGRAMS = {
    "slurmctld": "slurmctld",
    "slurmd": "slurmd",
    "sbatch": "slurm-client",
    "sacctmgr": "slurm-client",
    "munged": "munge",
    "mungekey": "munge",
    "slurmdbd": "slurmdbd",
    "mariadbd": "mariadb-server",
    "mariadb-install-db": "mariadb-server",
    "mariadb": "mariadb-client",
    "ip": "iproute2",
    "tc": "iproute2",
    "nsenter": "util-linux",
    "unshare": "util-linux",
}

POLICY_RC_D = Path("/usr/sbin/policy-rc.d")
# Exit 101 = "action forbidden": package scripts then start no system-wide munge, mariadb or
# slurm daemon, which would hold the default ports and the system's own munge socket.
POLICY_TEXT = "#!/bin/sh\n# Written by launcher.slurm.devcluster for the duration of one apt-get install.\nexit 101\n"


class InstallError(RuntimeError):
    pass


# sbin folders are not on every PATH (a plain user's, some CI images).
SEARCH_PATH = os.pathsep.join([os.environ.get("PATH", ""), "/usr/sbin", "/sbin", "/usr/bin", "/bin"])
DAEMON_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"


def program(name: str) -> str:
    """Absolute path of a program, so a PATH without sbin cannot break a start."""
    return shutil.which(name, path=SEARCH_PATH) or name


def missing_programs() -> list[str]:
    return [prog for prog in PROGRAMS if shutil.which(prog, path=SEARCH_PATH) is None]


def ensure_packages(log: Callable[[str], None], log_file: Path) -> bool:
    """apt-get install what is missing. Returns True if it installed anything."""
    missing = missing_programs()
    if not missing:
        return False
    packages = sorted(set(PACKAGES) | {PROGRAMS[p] for p in missing})
    log(f"installing Debian packages ({', '.join(sorted({PROGRAMS[p] for p in missing}))} missing)")
    apt_install(packages, log_file)
    still = missing_programs()
    if still:
        raise InstallError(f"installed {' '.join(packages)} but {', '.join(still)} still missing; see {log_file}")
    return True


def apt_install(packages: list[str], log_file: Path) -> None:
    """`apt-get update` and `apt-get install --no-install-recommends` with no daemon started by it."""
    env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
    created_policy = not POLICY_RC_D.exists()
    if created_policy:
        POLICY_RC_D.write_text(POLICY_TEXT)
        POLICY_RC_D.chmod(0o755)
    try:
        log_file.parent.mkdir(parents=True, exist_ok=True)
        with open(log_file, "ab") as out:
            for argv in (
                ["apt-get", "update"],
                ["apt-get", "install", "-y", "--no-install-recommends", *packages],
            ):
                out.write(f"\n=== {argv}\n".encode())
                out.flush()
                rc = subprocess.run(
                    argv, check=False, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT, env=env
                ).returncode
                if rc != 0:
                    raise InstallError(f"`{' '.join(argv[:2])}` exited {rc}; see {log_file}")
    finally:
        if created_policy:
            POLICY_RC_D.unlink(missing_ok=True)
