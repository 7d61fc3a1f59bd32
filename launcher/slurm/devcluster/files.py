"""What a dev cluster needs on disk before its daemons start: folders with the modes munge
insists on, stand-in GPU device files, and the config files (rewritten only when their text
changed, so `up` knows which daemons must restart)."""

from __future__ import annotations

import os
import stat
from pathlib import Path

from launcher.slurm.devcluster import accounting, conf, containers
from launcher.slurm.devcluster.conf import Layout, Ports

PORTS = Ports()


def configs(
    layout: Layout,
    nodes: tuple[str, ...],
    db_password: str,
    gpus: int,
    exclusive: bool = False,
    with_containers: bool = False,
) -> dict[Path, tuple[str, int]]:
    """`with_containers`: slurm.conf loads pyxis through etc/plugstack.conf (containers.py)."""
    cl = containers.ContainerLayout(layout=layout)
    plugstack = cl.plugstack if with_containers else None
    slurm = conf.slurm_conf_text(layout, nodes, PORTS, gpus=gpus, exclusive=exclusive, plugstack=plugstack)
    out = {
        layout.slurm_conf: (slurm, 0o644),
        layout.slurmdbd_conf: (conf.slurmdbd_conf_text(layout, db_password, PORTS), 0o600),
        layout.gres_conf: (conf.gres_conf_text(layout, nodes, gpus=gpus), 0o644),
        layout.hosts: (conf.hosts_text(nodes), 0o644),
        layout.resolv_conf: (conf.resolv_text(), 0o644),
    }
    if with_containers:
        out[cl.plugstack] = (containers.plugstack_text(cl), 0o644)
    return out


def absent(layout: Layout, with_containers: bool) -> list[Path]:
    """Files that must not be there: Slurm reads plugstack.conf next to slurm.conf even when slurm.conf
    does not name it, so pyxis stays loaded until the file goes."""
    return [] if with_containers else [containers.ContainerLayout(layout=layout).plugstack]


def configs_current(
    layout: Layout, nodes: tuple[str, ...], gpus: int, exclusive: bool = False, with_containers: bool = False
) -> bool:
    try:
        pw = layout.db_password_file.read_text().strip()
        want = configs(layout, nodes, pw, gpus, exclusive, with_containers)
        if any(p.exists() for p in absent(layout, with_containers)):
            return False
        return all(p.read_text() == text for p, (text, _) in want.items())
    except OSError:
        return False


def make_dirs(layout: Layout, names: tuple[str, ...], gpus: int) -> None:
    layout.root.mkdir(parents=True, exist_ok=True)
    layout.root.chmod(0o755)
    for d in (layout.etc, layout.munge_lib, layout.mysql_dir, layout.state_dir, layout.spool, layout.run, layout.log):
        d.mkdir(parents=True, exist_ok=True)
    # munged refuses a key folder others can read and a socket folder others cannot enter.
    layout.munge_key_dir.mkdir(parents=True, exist_ok=True)
    layout.munge_key_dir.chmod(0o700)
    layout.munge_socket_dir.mkdir(parents=True, exist_ok=True)
    layout.munge_socket_dir.chmod(0o755)
    layout.munge_lib.chmod(0o700)
    make_fake_gpus(layout, gpus)
    for n in names:  # slurmd does not create its spool folder
        layout.slurmd_spool(n).mkdir(parents=True, exist_ok=True)


def make_fake_gpus(layout: Layout, gpus: int) -> None:
    """Device files behind the fake GPUs: character devices 1:3, i.e. what /dev/null is, so
    anything that opens one reads nothing and writes nowhere. slurmd accepts a regular file
    too, with an error line in its log, which is the fallback where mknod is refused."""
    layout.fake_gpu_dir.mkdir(exist_ok=True)
    for f in conf.fake_gpu_files(layout, gpus):
        if f.exists() and stat.S_ISCHR(f.stat().st_mode):
            continue
        f.unlink(missing_ok=True)
        try:
            os.mknod(f, stat.S_IFCHR | 0o666, os.makedev(1, 3))
        except OSError:
            f.touch()


def write_configs(
    layout: Layout, names: tuple[str, ...], gpus: int, exclusive: bool = False, with_containers: bool = False
) -> set[Path]:
    """Write the config files; returns those whose text changed (their readers must restart)."""
    pw = accounting.db_password(layout)
    changed = set()
    for path, (text, mode) in configs(layout, names, pw, gpus, exclusive, with_containers).items():
        if not path.exists() or path.read_text() != text:
            tmp = path.with_suffix(".tmp")
            tmp.write_text(text)
            tmp.chmod(mode)
            tmp.replace(path)
            changed.add(path)
    for path in absent(layout, with_containers):
        if path.exists():
            path.unlink()
            changed.add(path)
    return changed
