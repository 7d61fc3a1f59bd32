"""cluster.pg_timeout_s reaches every process group a trial uses: the world group and each
(dp, pp, tp) mesh dim's, read back from the groups themselves (`group._get_backend(device)
.options._timeout`). Before, the 2-D/3-D layouts' sub-groups kept torch's default (30 min on
gloo, 10 on NCCL) whatever the cluster config said."""

from __future__ import annotations

import json
import socket
import subprocess
import sys

import pytest

pytestmark = pytest.mark.torch_dist

RANK_SCRIPT = r"""
import json, sys, torch, torch.distributed as dist
from types import SimpleNamespace
from launcher.train.dist import init
from launcher.train.engines.base import Topology
from launcher.train.env import RankEnv

rank, world, port = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
renv = RankEnv(rank=rank, local_rank=rank, world_size=world, master_addr="127.0.0.1", master_port=port, sources={})
init(renv, "gloo", torch.device("cpu"), 77.0)
seen = {"world": dist.group.WORLD._get_backend(torch.device("cpu")).options._timeout.total_seconds()}
shapes = [(2, 1, 1), (1, 2, 1), (1, 1, 2)] if world == 2 else [(2, 2, 1), (1, 2, 2), (2, 1, 2), (4, 1, 1)]
for dp, pp, tp in shapes:
    topo = Topology.build(SimpleNamespace(dp=dp, pp=pp, tp=tp), rank, torch.device("cpu"), timeout_s=77.0)
    for dim in ("dp", "pp", "tp"):
        group = topo.mesh[dim].get_group()
        seen[f"{dp}x{pp}x{tp}:{dim}"] = group._get_backend(torch.device("cpu")).options._timeout.total_seconds()
print(json.dumps(seen))
dist.destroy_process_group()
"""


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.parametrize("world", [2, 4])
def test_every_mesh_group_gets_the_configured_timeout(world, tmp_path):
    port = free_port()
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", RANK_SCRIPT, str(rank), str(world), str(port)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for rank in range(world)
    ]
    outs = [p.communicate(timeout=120) for p in procs]
    for p, (out, err) in zip(procs, outs, strict=True):
        assert p.returncode == 0, err[-3000:]
        seen = json.loads(out.strip().splitlines()[-1])
        assert len(seen) == 1 + 3 * (3 if world == 2 else 4)
        assert seen == dict.fromkeys(seen, 77.0)


def test_default_timeout_outlasts_compile_and_checkpoint_saves():
    """Schema default and the GPU cluster recipes: 30 min (schema.py says why); CPU test clusters keep 120 s."""
    from launcher.config.compose import compose_config  # lazy: composing loads hydra (a second)
    from launcher.config.schema import ClusterConfig

    assert ClusterConfig().pg_timeout_s == 1800.0
    for cluster in ("slurm", "example_gpu_site"):
        assert compose_config([f"cluster={cluster}"]).cluster.pg_timeout_s == 1800.0
    assert compose_config([]).cluster.pg_timeout_s == 120.0
