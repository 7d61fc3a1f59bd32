"""Start-up follows the shard: a rank of a sharded layout draws only the initial values of its
own piece (the tiles it overlaps, launcher/train/models/init.py), and those are exactly the
1-process reference's values there. Simulated ranks on torch's fake process group (no peers):
FSDP over 8 ranks and FSDP × TP over 2 × 2, a small tile so that every weight has many."""

from __future__ import annotations

import subprocess
import sys

import pytest

SIMULATED = r"""
import torch, torch.distributed as dist
from torch.testing._internal.distributed.fake_pg import FakeStore
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.fsdp import fully_shard
from torch.distributed.tensor import distribute_tensor
from launcher.config.schema import ModelConfig
from launcher.train.models import build_model, init
from launcher.train.engines.tp import apply_tensor_parallel

init.TILE, init.TILE_COLS = 512, 64  # many tiles per weight of this small model
drawn = [0]
rule = init.rule
def counting(owner, name):
    fill = rule(owner, name)
    return lambda t, g: (drawn.__setitem__(0, drawn[0] + t.numel()), fill(t, g))[1]
init.rule = counting

cfg = ModelConfig(arch="llama", n_layers=2, n_heads=4, n_kv_heads=2, d_model=128, vocab_size=384)
ref = build_model(cfg, seed=11).state_dict()
total = sum(v.numel() for v in ref.values())
dist.init_process_group("fake", rank=RANK, world_size=WORLD, store=FakeStore())
if TP == 1:
    mesh = init_device_mesh("cpu", (WORLD,), mesh_dim_names=("dp",))
else:
    mesh = init_device_mesh("cpu", (WORLD // TP, TP), mesh_dim_names=("dp", "tp"))
with torch.device("meta"):
    model = build_model(cfg)
if TP > 1:
    apply_tensor_parallel(model, mesh["tp"])
for block in model.blocks:
    fully_shard(block, mesh=mesh["dp"])
fully_shard(model, mesh=mesh["dp"])
drawn[0] = 0
init.materialise(model, torch.device("cpu"), seed=11)
for k, p in model.named_parameters():
    full = distribute_tensor(ref[k], p.device_mesh, p.placements, src_data_rank=None)
    assert torch.equal(p.to_local(), full.to_local()), k
print(drawn[0] / total)
dist.destroy_process_group()
"""


@pytest.mark.parametrize("world,tp,rank,most", [(8, 1, 0, 0.16), (8, 1, 5, 0.16), (8, 1, 7, 0.16), (4, 2, 3, 0.32)])
def test_a_rank_draws_only_its_shard_and_gets_the_reference_values(world, tp, rank, most):
    """At 8 FSDP ranks a rank draws about 1/8 of the model (tile edges add a little); at 2 × 2 a
    rank's piece is 1/4 of each weight (the norms are whole on every tp rank)."""
    code = SIMULATED.replace("RANK", str(rank)).replace("WORLD", str(world)).replace("TP", str(tp))
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-3000:]
    share = float(out.stdout.strip().splitlines()[-1])
    assert 1 / world <= share <= most
