"""Pure text of the dev cluster's configuration: paths, addresses, slurm.conf, slurmdbd.conf,
gres.conf and the hosts file the nodes see. No I/O here, so every line is unit-testable.

Everything the cluster writes lives under one folder (`Layout.root`), so `down` and a second
cluster folder never touch the system's own /etc/slurm, /etc/munge or /var/lib/mysql.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

DEFAULT_ROOT = Path(os.environ.get("LAUNCHER_DEVCLUSTER_DIR", "/var/tmp/launcher-devcluster"))
"""The cluster folder unless `--root` says otherwise."""
CLUSTER_NAME = "devcluster"
PARTITION = "debug"
CONTROLLER = "lnch-ctl"
"""Controller host name. slurmctld and slurmdbd run in their own UTS namespace with this hostname:
slurmctld compares its hostname with `SlurmctldHost`, and both bind the address it resolves to
(10.77.0.1) rather than every address of the machine."""
BRIDGE = "lnchbr0"
SUBNET_PREFIX = "10.77.0"
CONTROLLER_IP = f"{SUBNET_PREFIX}.1"
PREFIX_LEN = 24
NODE_CPUS = 2
NODE_MEMORY_MB = 4000
NODE_GPUS = 2
"""Stand-in GPUs per node unless `launcher cluster up --gpus-per-node N` asks for others."""
MAX_GPUS = 16
NODE_FEATURES = "dev,cpu"
ACCOUNT = "dev"
QOS = "normal"
DB_USER = "slurm"
DB_NAME = "slurm_acct_db"
MAX_NODES = 50
"""Node i gets 10.77.0.(10+i); past 50 the scheme would need another rule, and 2 cores do not
need more anyway."""


@dataclass(kw_only=True, frozen=True)
class Ports:
    ctld: int = 16817
    """slurmctld, on the bridge address."""
    slurmd: int = 16818
    """slurmd; the same on every node since each node has its own network namespace."""
    dbd: int = 16819
    """slurmdbd."""
    mariadb: int = 16820
    """MariaDB, bound to 127.0.0.1 only."""


@dataclass(kw_only=True, frozen=True)
class Layout:
    """Where each file of one cluster folder lives."""

    root: Path
    """The cluster folder."""

    @property
    def etc(self) -> Path:
        return self.root / "etc"

    @property
    def slurm_conf(self) -> Path:
        return self.etc / "slurm.conf"

    @property
    def slurmdbd_conf(self) -> Path:
        # slurmdbd looks for its file next to slurm.conf (dirname of SLURM_CONF).
        return self.etc / "slurmdbd.conf"

    @property
    def gres_conf(self) -> Path:
        return self.etc / "gres.conf"

    @property
    def hosts(self) -> Path:
        return self.etc / "hosts"

    @property
    def resolv_conf(self) -> Path:
        return self.etc / "resolv.conf"

    @property
    def munge_key_dir(self) -> Path:
        return self.root / "munge" / "etc"

    @property
    def munge_key(self) -> Path:
        return self.munge_key_dir / "munge.key"

    @property
    def munge_socket_dir(self) -> Path:
        return self.root / "munge" / "run"

    @property
    def munge_socket(self) -> Path:
        return self.munge_socket_dir / "munge.socket.2"

    @property
    def munge_lib(self) -> Path:
        return self.root / "munge" / "lib"

    @property
    def mysql_dir(self) -> Path:
        return self.root / "mysql"

    @property
    def mysql_data(self) -> Path:
        return self.mysql_dir / "data"

    @property
    def mysql_socket(self) -> Path:
        return self.mysql_dir / "mysqld.sock"

    @property
    def db_password_file(self) -> Path:
        return self.mysql_dir / "slurm.pass"

    @property
    def fake_gpu_dir(self) -> Path:
        return self.root / "fakegpu"

    @property
    def state_dir(self) -> Path:
        return self.root / "state"

    @property
    def spool(self) -> Path:
        return self.root / "spool"

    def slurmd_spool(self, node: str) -> Path:
        return self.spool / f"slurmd-{node}"

    @property
    def run(self) -> Path:
        return self.root / "run"

    @property
    def log(self) -> Path:
        return self.root / "log"

    def log_file(self, daemon: str) -> Path:
        return self.log / f"{daemon}.log"

    @property
    def state_file(self) -> Path:
        return self.root / "cluster.json"

    @property
    def jobcomp(self) -> Path:
        return self.log / "jobcomp.txt"


def node_names(count: int) -> tuple[str, ...]:
    if not 1 <= count <= MAX_NODES:
        raise ValueError(f"nodes={count}: the dev cluster takes 1 to {MAX_NODES} nodes")
    return tuple(f"n{i}" for i in range(1, count + 1))


def node_ip(node: str) -> str:
    """n1 → 10.77.0.11, n2 → 10.77.0.12, ..."""
    return f"{SUBNET_PREFIX}.{10 + int(node[1:])}"


def netns_name(node: str) -> str:
    return f"lnch-{node}"


def host_veth(node: str) -> str:
    """Host end of the node's veth pair (the node's end is `eth0` inside its namespace)."""
    return f"lnch-v{node}"


def hosts_text(nodes: tuple[str, ...]) -> str:
    lines = [
        "# Written by launcher.slurm.devcluster: the /etc/hosts every dev-cluster daemon and job sees.",
        "127.0.0.1\tlocalhost",
        "::1\tlocalhost ip6-localhost ip6-loopback",
        f"{CONTROLLER_IP}\t{CONTROLLER}",
    ]
    lines += [f"{node_ip(n)}\t{n}" for n in nodes]
    return "\n".join(lines) + "\n"


def resolv_text() -> str:
    # Names the hosts file lacks (an IPv6 lookup of n1 comes first) would go to the system's
    # DNS server, an address outside this machine, and stall ~10 s. The node's own loopback
    # refuses at once, so lookups end on the hosts file and no packet leaves our addresses.
    return (
        "# Written by launcher.slurm.devcluster: dev-cluster nodes resolve names from their hosts file only.\n"
        "nameserver 127.0.0.1\n"
        "options timeout:1 attempts:1\n"
    )


def node_cpus(gpus: int) -> int:
    """CPUs a node declares: at least one per stand-in GPU, so a rank per GPU at 1 CPU each
    schedules (config_overrides lets a node declare more CPUs than the machine's 2 cores)."""
    return max(NODE_CPUS, gpus)


def check_gpus(gpus: int) -> int:
    if not 1 <= gpus <= MAX_GPUS:
        raise ValueError(f"gpus per node={gpus}: the dev cluster takes 1 to {MAX_GPUS} stand-in GPUs per node")
    return gpus


def slurm_conf_text(
    layout: Layout,
    nodes: tuple[str, ...],
    ports: Ports = Ports(),
    *,
    gpus: int = NODE_GPUS,
    exclusive: bool = False,
    plugstack: Path | None = None,
) -> str:
    """`exclusive`: every job gets whole nodes (the bed's CPU share per node is then one job's alone).
    `plugstack`: the SPANK plugins' file (pyxis, with containers on); None: no SPANK plugin."""
    r = layout
    sock = r.munge_socket
    lines = [
        "# Written by launcher.slurm.devcluster on every `launcher cluster up`; edits are overwritten.",
        f"ClusterName={CLUSTER_NAME}",
        f"SlurmctldHost={CONTROLLER}({CONTROLLER_IP})",
        f"SlurmctldPort={ports.ctld}",
        # slurmctld binds the address its hostname resolves to (10.77.0.1), not every address.
        "CommunicationParameters=NoCtldInAddrAny",
        f"SlurmdPort={ports.slurmd}",
        "SlurmUser=root",
        "SlurmdUser=root",
        "AuthType=auth/munge",
        "CredType=cred/munge",
        # cred_expire: a requeued job may start again only once its old credential has expired
        # (Slurm's default holds it 120 s); 20 s still leaves a job step ample time to launch.
        f"AuthInfo=socket={sock},cred_expire=20",
        f"StateSaveLocation={r.state_dir}",
        f"SlurmdSpoolDir={r.spool}/slurmd-%n",
        f"SlurmctldPidFile={r.run}/slurmctld.pid",
        f"SlurmdPidFile={r.run}/slurmd-%n.pid",
        f"SlurmctldLogFile={r.log}/slurmctld.log",
        f"SlurmdLogFile={r.log}/slurmd-%n.log",
        "SlurmctldDebug=info",
        "SlurmdDebug=info",
        "MpiDefault=none",
        "ProctrackType=proctrack/linuxproc",
        "TaskPlugin=task/none",
        # Contain gives every allocation an `.extern` step, as on production clusters.
        "PrologFlags=Contain",
        "SelectType=select/cons_tres",
        "SelectTypeParameters=CR_Core",
        "SchedulerType=sched/backfill",
        "JobAcctGatherType=jobacct_gather/linux",
        "JobAcctGatherFrequency=30",
        "AccountingStorageType=accounting_storage/slurmdbd",
        # The bridge address, not localhost: sacct must also work from inside a node.
        f"AccountingStorageHost={CONTROLLER_IP}",
        f"AccountingStoragePort={ports.dbd}",
        # With a non-default munge socket, ctld→dbd auth ignores AuthInfo and reads this instead.
        f"AccountingStoragePass={sock}",
        "AccountingStorageEnforce=associations,limits,qos",
        "AccountingStorageTRES=gres/gpu",
        "JobCompType=jobcomp/filetxt",
        f"JobCompLoc={r.jobcomp}",
        "ReturnToService=2",
        "SlurmdTimeout=20",
        "KillWait=5",
        "InactiveLimit=0",
        "MinJobAge=300",
        # Lets four nodes each declare 2 (or one per GPU) CPUs while the machine has 2 cores in all.
        "SlurmdParameters=config_overrides",
        "GresTypes=gpu",
    ]
    if plugstack is not None:
        # Read by srun and sbatch (the plugin's --container-* options) and by slurmd and slurmstepd.
        lines.append(f"PlugStackConfig={plugstack}")
    lines += [
        f"NodeName={n} NodeAddr={node_ip(n)} NodeHostname={n} CPUs={node_cpus(gpus)} "
        f"RealMemory={NODE_MEMORY_MB} Gres=gpu:{gpus} Feature={NODE_FEATURES} State=UNKNOWN"
        for n in nodes
    ]
    lines.append(
        f"PartitionName={PARTITION} Nodes=ALL Default=YES MaxTime=INFINITE State=UP"
        + (" OverSubscribe=EXCLUSIVE" if exclusive else "")
    )
    return "\n".join(lines) + "\n"


def slurmdbd_conf_text(layout: Layout, db_password: str, ports: Ports = Ports()) -> str:
    r = layout
    lines = [
        "# Written by launcher.slurm.devcluster on every `launcher cluster up`; edits are overwritten.",
        "AuthType=auth/munge",
        f"AuthInfo=socket={r.munge_socket}",
        # slurmdbd checks DbdHost against its own hostname; "localhost" is always accepted.
        "DbdHost=localhost",
        f"DbdPort={ports.dbd}",
        # Bind the address of its hostname (it runs as lnch-ctl: 10.77.0.1), not every address.
        "CommunicationParameters=NoInAddrAny",
        "SlurmUser=root",
        f"PidFile={r.run}/slurmdbd.pid",
        f"LogFile={r.log}/slurmdbd.log",
        "DebugLevel=info",
        "StorageType=accounting_storage/mysql",
        # An address, not "localhost": the MySQL client turns "localhost" into the system's socket.
        "StorageHost=127.0.0.1",
        f"StoragePort={ports.mariadb}",
        f"StorageUser={DB_USER}",
        f"StoragePass={db_password}",
        f"StorageLoc={DB_NAME}",
    ]
    return "\n".join(lines) + "\n"


def fake_gpu_files(layout: Layout, gpus: int = NODE_GPUS) -> list[Path]:
    return [layout.fake_gpu_dir / f"gpu{i}" for i in range(gpus)]


def gres_conf_text(layout: Layout, nodes: tuple[str, ...], *, gpus: int = NODE_GPUS) -> str:
    # slurmd 22.05 drops a GPU without File= ("Ignoring file-less GPU") and the node registers
    # 0 < 2 GPUs, INVALID. Empty regular files in the cluster folder satisfy it: nothing opens
    # them under task/none, and no CUDA program can mistake them for a device. With a file per
    # GPU, Slurm sets CUDA_VISIBLE_DEVICES for each step to the indices it allocated.
    files = f"{layout.fake_gpu_dir}/gpu[0-{gpus - 1}]" if gpus > 1 else str(fake_gpu_files(layout, gpus)[0])
    lines = ["# Written by launcher.slurm.devcluster: fake GPUs backed by empty files.", "AutoDetect=off"]
    lines += [f"NodeName={n} Name=gpu Count={gpus} File={files}" for n in nodes]
    return "\n".join(lines) + "\n"


def mariadb_argv(layout: Layout, ports: Ports = Ports(), mariadbd: str = "mariadbd") -> list[str]:
    r = layout
    return [
        mariadbd,
        "--no-defaults",
        f"--datadir={r.mysql_data}",
        f"--socket={r.mysql_socket}",
        f"--pid-file={r.run}/mariadb.pid",
        f"--log-error={r.log}/mariadb.log",
        f"--tmpdir={r.mysql_dir}",
        f"--port={ports.mariadb}",
        "--bind-address=127.0.0.1",
        "--user=root",
        "--skip-name-resolve",
        "--skip-log-bin",
        # Slurm's lock timeout; a small buffer pool (slurmdbd logs a harmless "not recommended"
        # line below 512M, and a dev cluster's few rows do not need more); no fsync per commit.
        "--innodb-buffer-pool-size=128M",
        "--innodb-lock-wait-timeout=900",
        "--innodb-flush-log-at-trx-commit=2",
    ]
