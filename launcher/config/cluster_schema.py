"""Where trials run: the cluster config (part of launcher/config/schema.py's LauncherConfig)."""

from __future__ import annotations

from dataclasses import dataclass, field

from launcher.config.choices import ClusterKind, ContainerRuntime, DeviceKind, Launch, Link


@dataclass(kw_only=True, frozen=True)
class ClusterConfig:
    name: str = "local"
    """Cluster preset name, recorded with every trial."""
    kind: ClusterKind = ClusterKind.local
    """Executor: `local` runs a trial's ranks as processes here; `slurm` submits sbatch jobs."""
    device: DeviceKind = DeviceKind.auto
    """Device per rank; `auto` is CUDA when available, else CPU."""
    device_name: str = "cpu"
    """Name of the device, recorded, and the row of the peak table (launcher/compute/peaks.py) MFU
    uses, matched case-insensitively: "A100-SXM4-80GB", "NVIDIA H100 80GB HBM3" (as
    torch.cuda.get_device_name reports it), "MI300X". On CUDA the GPU torch reports wins, over an
    unknown name ("cpu") silently, over one of other peaks (peak_flops_per_device too) with a line
    under the table; on CPU no row applies. `launcher plan` runs nothing: it uses this name."""
    peak_flops_per_device: float | None = None
    """Dense peak FLOP/s of one device at the precision its matmuls run in (bf16/fp16, or tf32 for
    fp32 on CUDA), overriding the table. null → the table's peak for the device; a device the
    table does not know (every CPU) → MFU is null. An explicit peak that does not fit the
    precision on a known device (H100's bf16 9.89e14 for an fp32 run) is flagged in the report."""
    usd_per_device_hour: float | None = None
    """Price of one device-hour (one GPU-hour on GPU clusters); null → $ columns are null
    (device-hours per 1M tokens are always shown)."""
    spot_discount: float = 0.0
    """Fraction off the device-hour price for spot/preemptible capacity, in [0, 1): $ uses price × (1 − d)."""
    intra_link: Link = Link.nvlink
    """Link between devices of one node, for `launcher plan` when nothing measured says otherwise."""
    inter_link: Link = Link.ib400
    """Network link between nodes, one NIC's rate, for `launcher plan` when nothing measured says otherwise."""
    nics_per_node: int | None = None
    """Network interfaces (rails) per node carrying inter-node traffic at `inter_link` each: 8 on
    DGX/HGX-class nodes (one NIC per GPU). null → 1: the node's traffic shares one NIC."""
    nvlink_domain: int | None = None
    """GPUs sharing one NVLink domain (an NVSwitch fabric), a multiple of the GPUs per node (refused in one
    line otherwise): 72 for GB200 NVL72 (18 nodes of 4). For `launcher plan`: a collective whose group fits
    in one domain runs on `intra_link`, not the inter-node one, and `plan --search` tries tensor parallel
    over whole nodes up to it (tp 16 over 4 trays). null: one node's GPUs."""
    nodes_per_leaf: int | None = None
    """Nodes under one leaf switch of the network (a scalable unit: 32 DGX nodes in NVIDIA's SuperPOD
    reference), for `launcher plan`: a collective whose group spans more nodes than one leaf holds crosses
    the switches above it, at the inter-node link ÷ `oversubscription`. null: every node under one
    non-blocking fabric."""
    oversubscription: float = 1.0
    """Ratio of a leaf's downlink to its uplink bandwidth (≥ 1): 1 for a non-blocking fat tree; Llama 3's
    fabric has 7 between its 3072-GPU pods (arXiv 2407.21783 §3.3.1). Used with `nodes_per_leaf`."""
    step_jitter: float | None = None
    """Mean relative delay of one rank's compute per step (≥ 0), for `launcher plan`: a synchronous step waits
    for the slowest rank, which costs 1 + jitter·(H_N − 1) at N ranks (launcher/perf/stragglers.py).
    null: the published corpus's fitted figure on GPUs (preset_fit.json's `jitter`), 0 on CPU ranks."""
    power_limit_w: float | None = None
    """Board power limit each GPU is held at (`nvidia-smi -pl`), in W, where a site sets one below the TDP
    (torchtitan's Grand Teton H100s: 500 W of 700 W), for `launcher plan` on presets: compute runs at
    (limit ÷ TDP)^(1/3) of its nominal rate (launcher/compute/power.py). null: the TDP, no limit."""
    profile: str | None = None
    """A site profile (`launcher profile --output PATH` measures one): `launcher plan` on presets then
    prices compute at its measured matmul rate at the model's shapes and takes its links from its measured
    all-reduces (in-node and between nodes; a scope it did not measure keeps intra_link / inter_link).
    A missing or damaged file stops the plan with one line. Null: the nominal presets and fitted MFU."""
    threads_per_rank: int = 1
    """CPU threads per rank (torch.set_num_threads, OMP_NUM_THREADS); on Slurm at most cpus_per_task."""
    trial_timeout_s: float = 600.0
    """local: a trial still running after this many seconds is killed and recorded as failed."""
    pg_timeout_s: float = 1800.0
    """Collective timeout of every process group (world, mesh dims): a rank stuck on a dead peer gives up
    after it. 1800 s (gloo's default) outlasts a peer's first-step compile or checkpoint save of a big model."""
    device_memory_gb: float | None = None
    """Memory of one GPU in GiB (e.g. 80 for an 80 GB A100/H100); null: the peak table's for device_name
    (compute/peaks.py), unchecked for a device it lacks. Each trial's per-rank memory is estimated first
    (perf/memory.py): one that cannot fit is a predicted `oom`, not launched (plan: `oom (predicted)`)."""
    host_memory_gb: float | None = None
    """Memory of one host (node) in GiB, shared by the CPU ranks on it, for the same check on CPU trials. Null: this
    machine's MemTotal for cluster.kind=local; on Slurm, cluster.mem when set, else no check."""
    # --- slurm only ---------------------------------------------------------------------
    partition: str | None = None
    """`--partition`; null → the cluster's default partition."""
    account: str | None = None
    """`--account` to charge."""
    qos: str | None = None
    """`--qos`."""
    time_limit: str = "00:30:00"
    """`--time` per job ([D-]HH:MM:SS or minutes)."""
    nodes: int = 1
    """Nodes of a single `launcher run`."""
    gpus_per_node: int = 0
    """GPUs per node; > 0 adds `--gres=gpu:N` and one rank per GPU: each rank uses the GPU at its
    local rank among those it sees (CUDA_VISIBLE_DEVICES), never one another rank uses."""
    gpus_per_task: int | None = None
    """srun launch (a command: either job.launch): `--gpus-per-task=N` (job and step) in place of
    `--gres=gpu:gpus_per_node`: Slurm binds each rank its own N GPUs, and each rank sees only those (its
    first is its device); torchrun's step asks for the node's GPUs instead."""
    gpu_bind: str | None = None
    """srun launch (a command: either job.launch): `--gpu-bind=` (job and step): `single:1`, `closest`,
    `map_gpu:0,1`, …; a rank that sees several takes its place among the tasks given the same set."""
    tasks_per_node: int | None = None
    """Ranks per node; null → gpus_per_node, or 1 without GPUs."""
    cpus_per_task: int = 1
    """CPUs for each rank: `--cpus-per-task` of the job and of its srun step (torchrun launch: the
    one task per node gets ranks per node × this). Slurm: at least threads_per_rank."""
    mem: str | None = None
    """`--mem` per node, e.g. 64G; null → the partition's default."""
    constraint: str | None = None
    """`--constraint` (node features), e.g. a100&ib."""
    exclusive: bool = False
    """`--exclusive`: no other job shares the nodes (clean measurements)."""
    sbatch_extra: list[str] = field(default_factory=list)
    """Extra `#SBATCH` options, one per item, e.g. ["--mail-type=END"]."""
    setup: list[str] = field(default_factory=list)
    """Shell lines run before training (module load, venv activation): the user's own code, verbatim."""
    env: list[str] = field(default_factory=list)
    """Environment variables for every rank, `NAME=value` each, exported after the setup lines.
    Values are quoted in the script, so they stay data, except `${NAME}`, which expands when the job
    runs (unset → empty): `PATH=/opt/x/bin:${PATH}` (in YAML or an override, write `\\${PATH}`:
    OmegaConf would resolve `${...}` itself). Not for secrets: the script is a file; let secrets
    reach jobs through the environment sbatch inherits from your shell."""
    launch: Launch = Launch.srun
    """`srun`: one task per rank. `torchrun`: one task per node, torchrun spawns the ranks (c10d rendezvous)."""
    python: str | None = None
    """Python that runs the payload (and torchrun's module) on the nodes; null → `python3` inside a
    container image (cluster.container_image); else `python` from the job's PATH when there are setup
    lines (what `module load` or an activation put there); else the launcher's own interpreter (nodes
    that share this filesystem and its venv)."""
    container_image: str | None = None
    """Image every step on a node runs in (the link probe, the ranks, torchrun's agents, a command's
    record step): pyxis's `--container-image` (e.g. `nvcr.io#nvidia/pytorch:25.09-py3` or a .sqsh
    path) or Apptainer's image (a .sif path or `docker://…`). It needs Python and torch only: the
    launcher's package is mounted read-only at /opt/launcher/launcher and put on PYTHONPATH, the sweep
    folder and the submit folder are mounted at their own paths, and steps start in the submit
    folder. Null: no container."""
    container_runtime: ContainerRuntime = ContainerRuntime.pyxis
    """`pyxis`: srun's pyxis options (enroot underneath). `apptainer`: each step runs
    `apptainer exec [--nv] --bind … --pwd <submit folder> IMAGE …` under srun (`--nv` where the job has GPUs)."""
    container_mounts: list[str] = field(default_factory=list)
    """Your own `src:dst[:flags]` bind mounts (datasets, caches), besides the three the launcher adds."""
    container_reuse: bool = True
    """pyxis: one container per job and node (`--container-name=launcher_<job id>`), which the link probe,
    the ranks and the record step share, so a site whose pyxis unpacks images (its default) unpacks once a
    job, not once a step. Off where pyxis mounts the squashfs image itself (use_squashfuse), as on the dev
    cluster: a named container is unpacked even there."""
    signal_warning_s: int = 120
    """Seconds before the time limit at which Slurm sends USR1 (`--signal`)."""
    slurm_conf: str | None = None
    """SLURM_CONF for the Slurm client commands (the dev cluster's); null → Slurm's own default."""
    serialize_trials: bool = False
    """Run a sweep's jobs one at a time (`--dependency=singleton`): needed where nodes share cores."""
