"""Accounting: MariaDB's data folder and the slurmdbd user in it, and the Slurm associations
(cluster, account `dev` with root in it, QOS `normal`) that `--account=dev --qos=normal` need."""

from __future__ import annotations

import os
import secrets
import subprocess
import time

from launcher.slurm.devcluster import conf
from launcher.slurm.devcluster.conf import Layout
from launcher.slurm.devcluster.errors import DevClusterError
from launcher.slurm.devcluster.install import program


def db_password(layout: Layout) -> str:
    """The slurmdbd→MariaDB password, made once per cluster folder (MariaDB listens on 127.0.0.1 only)."""
    f = layout.db_password_file
    if not f.exists():
        f.write_text(secrets.token_hex(16) + "\n")
        f.chmod(0o600)
    return f.read_text().strip()


def init_datadir(layout: Layout) -> None:
    if (layout.mysql_data / "mysql").is_dir():
        return
    argv = [
        program("mariadb-install-db"),
        "--no-defaults",
        f"--datadir={layout.mysql_data}",
        "--user=root",
        # root logs in through the socket as the system's root, with no password to keep.
        "--auth-root-authentication-method=socket",
        "--skip-test-db",
    ]
    r = subprocess.run(argv, check=False, capture_output=True, text=True)
    if r.returncode != 0:
        out = layout.log / "mariadb-install-db.log"
        out.write_text(r.stdout + r.stderr)
        raise DevClusterError(f"mariadb-install-db failed; read {out}")


def ensure_db_user(layout: Layout) -> None:
    pw = db_password(layout)
    user = f"'{conf.DB_USER}'@'127.0.0.1'"
    sql = (
        f"CREATE USER IF NOT EXISTS {user} IDENTIFIED BY '{pw}'; "
        f"ALTER USER {user} IDENTIFIED BY '{pw}'; "
        f"GRANT ALL ON {conf.DB_NAME}.* TO {user};"
    )
    argv = [program("mariadb"), "--no-defaults", f"--socket={layout.mysql_socket}", "-u", "root", "-e", sql]
    r = subprocess.run(argv, check=False, capture_output=True, text=True)
    if r.returncode != 0:
        raise DevClusterError(f"could not create the slurm database user: {r.stderr.strip()}")


def _sacctmgr(layout: Layout, *args: str) -> subprocess.CompletedProcess:
    argv = [program("sacctmgr"), "--immediate", "--noheader", "--parsable2", *args]
    env = dict(os.environ, SLURM_CONF=str(layout.slurm_conf))
    return subprocess.run(argv, check=False, capture_output=True, text=True, env=env, timeout=30)


def ensure_associations(layout: Layout, timeout: float) -> None:
    """Cluster, QOS `normal`, account `dev`, root in `dev` (its default account); each only if absent."""
    c = conf.CLUSTER_NAME
    steps: list[tuple[list[str], str, list[str]]] = [
        (["show", "cluster", "format=cluster"], c, ["add", "cluster", c]),
        (["show", "qos", "format=name", "where", f"name={conf.QOS}"], conf.QOS, ["add", "qos", conf.QOS]),
        (
            ["show", "account", "format=account", "where", f"name={conf.ACCOUNT}"],
            conf.ACCOUNT,
            ["add", "account", conf.ACCOUNT, f"cluster={c}", "description=dev cluster", "organization=launcher"],
        ),
        (
            ["show", "assoc", "format=account", "where", "user=root", f"account={conf.ACCOUNT}", f"cluster={c}"],
            conf.ACCOUNT,
            ["add", "user", "root", f"account={conf.ACCOUNT}", f"cluster={c}", f"qos={conf.QOS}"],
        ),
    ]
    deadline = time.monotonic() + timeout
    for show, wanted, add in steps:
        # slurmdbd accepts connections a moment before it answers queries.
        while (r := _sacctmgr(layout, *show)).returncode != 0:
            if time.monotonic() > deadline:
                raise DevClusterError(
                    f"slurmdbd does not answer sacctmgr ({r.stderr.strip()}); read {layout.log_file('slurmdbd')}"
                )
            time.sleep(0.2)
        if wanted not in r.stdout.split():
            r = _sacctmgr(layout, *add)
            if r.returncode != 0:
                raise DevClusterError(f"`sacctmgr {' '.join(add)}` failed: {(r.stderr or r.stdout).strip()}")
    r = _sacctmgr(layout, "modify", "user", "root", "set", f"defaultaccount={conf.ACCOUNT}")
    # Exit 1 is sacctmgr's "Nothing modified": root's default was already `dev`.
    if r.returncode not in (0, 1):
        raise DevClusterError(f"`sacctmgr modify user root` failed: {(r.stderr or r.stdout).strip()}")
