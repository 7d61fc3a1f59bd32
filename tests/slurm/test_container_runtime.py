"""A real container runtime on the dev cluster: pyxis + enroot (`launcher cluster up --containers`,
built from third_party/) run job steps inside the cluster's image (Debian, python3, the host's torch,
nothing of the launcher). Each test submits a real job whose steps use pyxis' srun options and asserts
facts that hold only inside the image. The config text: tests/unit/test_devcluster_containers.py."""

from __future__ import annotations

import importlib.metadata
import importlib.util
import json
import os
import shlex
import time
from pathlib import Path

import pytest

from launcher.slurm import devcluster
from launcher.slurm.devcluster import containers
from tests.slurm.test_devcluster_slurm import run, submit, wait_done

pytestmark = pytest.mark.slurm

REPO = Path(__file__).resolve().parents[2]
"""Where the launcher lives on the host; the image has no such folder."""

PROBE = r"""
import importlib.util, json, os, socket, sys
marker_path, repo = sys.argv[1:3]
osr = dict(l.split("=", 1) for l in open("/etc/os-release").read().splitlines() if "=" in l)
import torch
name = f"from-{socket.gethostname()}-{os.environ['SLURM_PROCID']}.txt"
with open(name, "w") as f:
    f.write(os.environ["SLURM_JOB_ID"])
print("PROBE " + json.dumps({
    "host": socket.gethostname(),
    "rank": int(os.environ["SLURM_PROCID"]),
    "os": osr["PRETTY_NAME"].strip('"'),
    "python": sys.version.split()[0],
    "executable": sys.executable,
    "torch": torch.__version__,
    "marker": json.loads(open(marker_path).read()) if os.path.exists(marker_path) else None,
    "repo_exists": os.path.exists(repo),
    "found": sorted(m for m in ("launcher", "hydra", "omegaconf") if importlib.util.find_spec(m) is not None),
    "cwd": os.getcwd(),
    "wrote": name,
}), flush=True)
"""


@pytest.fixture(scope="module")
def cluster() -> devcluster.DevCluster:
    if os.geteuid() != 0:
        pytest.skip("the dev cluster needs root")
    # `launcher cluster up --containers`: loads pyxis into a running cluster without it (a restart) and
    # builds what its cache lacks.
    return devcluster.up(nodes=4, with_containers=True, log=lambda _: None)


@pytest.fixture(scope="module")
def image(cluster) -> tuple[Path, dict]:
    path, info = containers.image_path(cluster.root), containers.image_info(cluster.root)
    assert path.is_file() and info is not None
    return path, info


def _job(
    c: devcluster.DevCluster, folder: Path, body: list[str], *sbatch: str, timeout: float = 240
) -> tuple[str, str]:
    """Run a batch script of `body` lines (already quoted) to the end: (its job id, its output)."""
    script = folder / "job.sh"
    script.write_text("#!/bin/bash\nset -euo pipefail\n" + "\n".join(body) + "\n")
    out = folder / "job.out"
    job = submit(c, f"--output={out}", f"--chdir={folder}", *sbatch, str(script))
    state = wait_done(c, job, timeout=timeout)
    text = out.read_text() if out.exists() else ""
    assert state == "COMPLETED", f"job {job} {state}:\n{text}"
    return job, text


def _probes(text: str) -> list[dict]:
    return sorted(
        (json.loads(line[6:]) for line in text.splitlines() if line.startswith("PROBE ")), key=lambda p: p["rank"]
    )


def _probe_step(img: Path, mount: Path) -> str:
    argv = [
        "srun",
        f"--container-image={img}",
        f"--container-mounts={mount}:/mnt/out",
        "--container-workdir=/mnt/out",
        "python3",
        "-c",
        PROBE,
        containers.IMAGE_MARKER,
        str(REPO),
    ]
    return shlex.join(argv)


def test_the_cluster_says_containers_are_on(cluster, image):
    path, info = image
    assert cluster.containers and containers.enabled(cluster.root)
    assert devcluster.current(cluster.root) == cluster
    # A plain `up` (every other test file's fixture) keeps them, at once.
    t = time.monotonic()
    assert devcluster.up(nodes=4, root=cluster.root, log=lambda _: None) == cluster
    assert time.monotonic() - t < 1.0
    text = devcluster.status(cluster.root)
    assert (
        f"containers: on: pyxis 0.24.0 + enroot 4.1.2 (built against Slurm 22.05.8), {cluster.root}/etc/plugstack.conf"
        in text
    )
    assert f"srun --container-image={path}" in text
    assert info["torch"] == importlib.metadata.version("torch")
    assert info["absent"] == ["hydra", "launcher", "omegaconf"] and info["os"] == "Debian GNU/Linux 12 (bookworm)"
    # srun itself reads plugstack.conf: pyxis' options are srun's.
    assert "--container-image=" in run(cluster, "srun", "--help").stdout


def test_a_step_runs_in_the_image_with_its_mount_and_workdir(cluster, image, tmp_path):
    path, info = image
    # The host that submits has what the image must not: the launcher's folder and its packages.
    assert REPO.is_dir() and importlib.util.find_spec("omegaconf") is not None
    out = tmp_path / "out"
    out.mkdir()
    job, text = _job(cluster, tmp_path, [_probe_step(path, out)], "--nodes=1", "--ntasks=1")
    (p,) = _probes(text)
    assert p["marker"] == {"built": info["built"], "recipe": containers.IMAGE_RECIPE}
    assert (p["os"], p["python"], p["torch"]) == (info["os"], info["python"], info["torch"])
    assert p["executable"] == "/usr/bin/python3"
    assert p["found"] == [] and p["repo_exists"] is False
    assert p["cwd"] == "/mnt/out"
    assert p["host"] in cluster.nodes
    # Written in the container's /mnt/out, read on the host: the bind mount is writable.
    assert [f.name for f in out.iterdir()] == [p["wrote"]] and (out / p["wrote"]).read_text() == job


def test_two_nodes_each_run_the_step_in_the_image(cluster, image, tmp_path):
    path, info = image
    out = tmp_path / "out"
    out.mkdir()
    job, text = _job(cluster, tmp_path, [_probe_step(path, out)], "--nodes=2", "--ntasks-per-node=1")
    probes = _probes(text)
    assert [p["rank"] for p in probes] == [0, 1]
    assert len({p["host"] for p in probes}) == 2 and {p["host"] for p in probes} <= set(cluster.nodes)
    for p in probes:
        assert p["marker"]["built"] == info["built"] and p["torch"] == info["torch"]
        assert p["found"] == [] and p["repo_exists"] is False and p["cwd"] == "/mnt/out"
    assert sorted(f.name for f in out.iterdir()) == sorted(p["wrote"] for p in probes)
    assert {f.read_text() for f in out.iterdir()} == {job}  # both nodes wrote through their mount


def test_a_named_container_is_kept_across_the_steps_of_its_job_only(cluster, image, tmp_path):
    path, _ = image
    cl = containers.container_layout(cluster.root)
    img = shlex.quote(f"--container-image={path}")
    data = shlex.quote(str(cl.var))

    def timed(label: str, step: str) -> list[str]:
        return ["t0=$EPOCHREALTIME", step, f'echo "TIME {label} $t0 $EPOCHREALTIME"']

    # The image's root filesystem is read-only unless the step says --container-writable (enroot's default).
    body = [
        *timed(
            "create",
            f"srun {img} --container-name=keep --container-writable sh -c 'echo $SLURM_JOB_ID > /left-by-step-0'",
        ),
        *timed("reuse", "srun --container-name=keep sh -c 'echo \"REUSED $(cat /left-by-step-0)\"'"),
        *timed("unnamed", f"srun {img} sh -c 'test -e /left-by-step-0 && echo SEEN || echo FRESH'"),
        # The batch step runs on the node itself, outside any container: the kept rootfs is there.
        f'test -d {data}/"$(hostname)"/data/pyxis_"$SLURM_JOB_ID"_keep && echo "KEPT $(hostname)"',
    ]
    job_id, text = _job(cluster, tmp_path, body, "--nodes=1", "--ntasks=1")
    lines = text.splitlines()
    assert f"REUSED {job_id}" in lines  # step 1 read what step 0 wrote in the container's own /
    assert "FRESH" in lines and "SEEN" not in lines
    (kept,) = [line.split()[1] for line in lines if line.startswith("KEPT ")]
    assert kept in cluster.nodes
    times = {w[1]: round(float(w[3]) - float(w[2]), 2) for w in (line.split() for line in lines) if w[0] == "TIME"}
    print(f"seconds per step: {times}")  # measured on the dev cluster; see containers.PYXIS_ARGS
    # pyxis' job epilog (container_scope=job) removes the job's named container.
    left = cl.data(kept) / f"pyxis_{job_id}_keep"
    deadline = time.monotonic() + 180
    while left.exists() and time.monotonic() < deadline:
        time.sleep(1)
    assert not left.exists()
    assert run(cluster, "sinfo", "--noheader", "--node", kept, "--format=%t").stdout.strip() in ("idle", "mix", "alloc")


ALL_REDUCE = r"""
import json, os, socket, torch, torch.distributed as dist
rank, world = int(os.environ["SLURM_PROCID"]), int(os.environ["SLURM_NTASKS"])
dist.init_process_group("gloo", rank=rank, world_size=world)
t = torch.tensor([float(rank + 1)])
dist.all_reduce(t)
print("RANK " + json.dumps({"rank": rank, "host": socket.gethostname(), "sum": t.item(), "torch": torch.__file__}))
dist.destroy_process_group()
"""


def test_gloo_all_reduce_across_two_nodes_inside_the_image(cluster, image, tmp_path):
    path, _ = image
    (tmp_path / "all_reduce.py").write_text(ALL_REDUCE)
    step = [
        'export MASTER_ADDR=$(scontrol show hostnames "$SLURM_JOB_NODELIST" | head -n1)',
        "export MASTER_PORT=$((20000 + SLURM_JOB_ID % 20000))",
        shlex.join(
            [
                "srun",
                f"--container-image={path}",
                f"--container-mounts={tmp_path}:/job:ro",
                "--container-workdir=/job",
                "python",
                "all_reduce.py",
            ]
        ),
    ]
    _, text = _job(cluster, tmp_path, step, "--nodes=2", "--ntasks-per-node=1")
    ranks = [json.loads(line[5:]) for line in text.splitlines() if line.startswith("RANK ")]
    assert sorted(r["rank"] for r in ranks) == [0, 1] and len({r["host"] for r in ranks}) == 2
    assert [r["sum"] for r in ranks] == [3.0, 3.0]  # 1 + 2, through the nodes' network
    assert {r["torch"] for r in ranks} == {"/usr/local/lib/python3.11/dist-packages/torch/__init__.py"}
