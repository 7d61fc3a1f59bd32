"""Job requests for the golden-file tests and the `sbatch --test-only` tests: each must be
valid on the dev cluster (partition debug, account dev, qos normal, feature dev, 2 GPUs/node)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from launcher.config.compose import compose_config
from launcher.slurm.render import JobRequest, Where
from launcher.slurm.submit import job_requests
from launcher.trials.spec import sweep_trials

SWEEP_DIR = Path("/scratch/results/golden-sweep")
# Where a container's mounts come from: the folder `launcher` ran in, and its package in a venv.
SUBMIT_DIR = Path("/home/me/project")
LAUNCHER_SRC = Path("/opt/venv/lib/python3.11/site-packages/launcher")
PY = "cluster.python=/opt/venv/bin/python"
SITE_SETUP = ["cluster.setup=['module load cuda/12.4','source /opt/venvs/train/bin/activate']"]
SITE_ENV = (
    r"cluster.env=['PATH=/opt/x/bin:\${PATH}','LD_LIBRARY_PATH=/opt/x/lib:\${LD_LIBRARY_PATH}',"
    r"'NOTE=$HOME `id` $(id) *']"
)
CONTAINER = [
    "cluster.container_image='nvcr.io#nvidia/pytorch:24.05-py3'",
    "cluster.container_mounts=['/scratch/results:/scratch/results','/datasets/my sets:/data:ro+rprivate']",
]

APPTAINER = [
    "cluster.container_runtime=apptainer",
    "cluster.container_image=/images/pytorch-25.09.sif",
    "cluster.container_mounts=['/datasets/my sets:/data:ro']",
]
COMMAND_ARGV = (
    "job.argv=[python,train.py,'--micro=${batch.micro}','--world=${trial.world_size}','--tag=it\\'s $(id) `id` *']"
)

CASES: dict[str, list[str]] = {
    "devcluster_2nodes": ["cluster=devcluster", "sweep.nodes=[2]", PY],
    "gpu_torchrun_all_options": [
        "cluster=example_gpu_site",
        "cluster.partition=debug",
        "cluster.account=dev",
        "cluster.qos=normal",
        "cluster.time_limit=00:20:00",
        "cluster.gpus_per_node=2",
        "cluster.cpus_per_task=1",
        "cluster.threads_per_rank=1",
        "cluster.mem=1G",
        "cluster.constraint=dev",
        "cluster.exclusive=true",
        "cluster.launch=torchrun",
        "cluster.sbatch_extra=['--mail-type=END','--comment=scaling']",
        "cluster.setup=['source $(conda info --base)/etc/profile.d/conda.sh','conda activate train']",
        "sweep.nodes=[2]",
        PY,
    ],
    # The repeats of a size are one job array, sweep.array_throttle of them at once (see test_array_and_pack_shapes).
    "repeats_three_rounds": [
        "cluster=devcluster",
        "sweep.nodes=[2]",
        "sweep.repeats=3",
        "cluster.serialize_trials=false",
        "sweep.array_throttle=2",
        PY,
    ],
    # Where jobs run one at a time (the dev cluster's serialize_trials), one plain job per repeat round instead.
    "repeats_serialized_rounds": ["cluster=devcluster", "sweep.nodes=[2]", "sweep.repeats=3", PY],
    "pack_1_2_4": ["cluster=devcluster", "sweep.nodes=[1,2,4]", "sweep.pack=true", PY],
    "quoted_payload_args": ["cluster=devcluster", "sweep.nodes=[1]", PY],
    # `launcher run --requeue` with checkpoints and an environment variable
    "run_requeue_env": [
        "cluster=devcluster",
        "cluster.nodes=2",
        "run.requeue=true",
        "run.checkpoint_every=50",
        "cluster.env=['NCCL_DEBUG=WARN','NOTE=two words; $(not run)']",
        PY,
    ],
    # A site's setup lines and no cluster.python: the job runs `python` from PATH after them;
    # `${NAME}` in cluster.env expands when the job runs (written `\${NAME}` for OmegaConf).
    "site_setup_srun": ["cluster=devcluster", "sweep.nodes=[1]", *SITE_SETUP, SITE_ENV],
    "site_setup_torchrun": ["cluster=devcluster", "sweep.nodes=[2]", "cluster.launch=torchrun", *SITE_SETUP, SITE_ENV],
    # Slurm binding each rank its own (stand-in) GPU: --gpus-per-task, or --gpu-bind so each task sees one.
    "gpus_per_task_srun": [
        "cluster=devcluster",
        "sweep.nodes=[2]",
        "cluster.gpus_per_node=2",
        "cluster.gpus_per_task=1",
        PY,
    ],
    "gpu_bind_single": [
        "cluster=devcluster",
        "sweep.nodes=[1]",
        "cluster.gpus_per_node=2",
        "cluster.gpu_bind=single:1",
        PY,
    ],
    "gpu_bind_closest": [
        "cluster=devcluster",
        "sweep.nodes=[1]",
        "cluster.gpus_per_node=2",
        "cluster.gpu_bind=closest",
        PY,
    ],
    "gpu_bind_map_gpu": [
        "cluster=devcluster",
        "sweep.nodes=[1]",
        "cluster.gpus_per_node=2",
        "cluster.gpu_bind='map_gpu:1,0'",
        PY,
    ],
    # pyxis/enroot containers (cluster.container_image/_mounts) on the payload's srun, both launches.
    # The image's python3 (no cluster.python), the launcher's package, sweep and submit folders mounted.
    "container_srun": ["cluster=devcluster", "sweep.nodes=[1]", *CONTAINER],
    # A site's pyxis that unpacks images: the job's steps share one named container per node.
    "container_torchrun": [
        "cluster=devcluster",
        "sweep.nodes=[2]",
        "cluster.launch=torchrun",
        *CONTAINER,
        "cluster.container_reuse=true",
    ],
    # A command trial: its probe, its ranks and its record step each a step in the image.
    "container_command_torchrun": ["cluster=devcluster", "sweep.nodes=[2]", "job=command", COMMAND_ARGV, *CONTAINER],
    "container_command_srun": [
        "cluster=devcluster",
        "sweep.nodes=[2]",
        "job=command",
        COMMAND_ARGV,
        "job.launch=srun",
        *CONTAINER,
        "cluster.python=/usr/bin/python3.12",
    ],
    # Apptainer: `apptainer exec --nv --bind … --pwd … IMAGE` before what each step runs.
    "apptainer_srun": ["cluster=devcluster", "sweep.nodes=[2]", "cluster.gpus_per_node=2", *APPTAINER],
    "apptainer_command_torchrun": ["cluster=devcluster", "sweep.nodes=[1]", "job=command", COMMAND_ARGV, *APPTAINER],
    # job=command: the user's argv and env per trial (quoted words; `${trial.*}` resolved per trial),
    # the link probe first, the record after; each launch.
    "command_torchrun_pack": [
        "cluster=devcluster",
        "sweep.nodes=[1,2]",
        "sweep.pack=true",
        "job=command",
        COMMAND_ARGV,
        "job.env={RUN_DIR: '${trial.dir}', NOTE: 'two words; $(not run)'}",
        PY,
    ],
    "command_srun_gpus": [
        "cluster=devcluster",
        "sweep.nodes=[2]",
        "cluster.gpus_per_node=2",
        "cluster.gpus_per_task=1",
        "job=command",
        "job.launch=srun",
        COMMAND_ARGV,
        PY,
    ],
    # GPUs bound per task under torchrun: the agent's step asks for the node's GPUs, without the job's binding.
    "command_torchrun_gpus": [
        "cluster=devcluster",
        "sweep.nodes=[2]",
        "cluster.gpus_per_node=2",
        "cluster.gpus_per_task=1",
        "job=command",
        COMMAND_ARGV,
        PY,
    ],
    "command_none_no_probe": [
        "cluster=devcluster",
        "sweep.nodes=[1]",
        "job=command",
        "job.launch=none",
        "job.probe=false",
        "job.argv=[mpirun,-np,'${trial.world_size}',./train,--out,'${trial.dir}/out.txt']",
        PY,
    ],
}
RUNS = {"run_requeue_env"}  # planned as `launcher run` plans its one trial

PAYLOAD_ARGS = {"quoted_payload_args": ("--save-params", "/scratch/it's here/$(params).pt")}


def scripts(name: str, sweep_dir: Path = SWEEP_DIR, extra: Sequence[str] = ()) -> list[tuple[JobRequest, str]]:
    """The (request, script) of each job case `name` renders, its overrides followed by `extra`."""
    from launcher.run.run import as_sweep, run_trials

    cfg = compose_config([*CASES[name], *extra])
    if name in RUNS:
        cfg = as_sweep(cfg)
    trials = run_trials(cfg) if name in RUNS else sweep_trials(cfg)
    where = Where(submit_dir=SUBMIT_DIR, sweep_dir=sweep_dir, launcher_src=LAUNCHER_SRC)
    jobs = job_requests(cfg, sweep_dir, trials, payload_args=PAYLOAD_ARGS.get(name, ()), where=where)
    return [(j.request, j.script) for j in jobs]
