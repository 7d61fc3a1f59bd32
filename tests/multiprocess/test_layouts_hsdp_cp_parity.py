"""HSDP and context parallelism equal the 1-process reference (losses and gathered final parameters within 1e-6,
fp32, through the real payload in real processes: tests/support/layout_parity.py).

HSDP: FSDP2 on a (replicate, shard) mesh: one shard group of 2 (replicate 1), two replicas of one rank each
(shard 1: plain replication), and 2 × 2 on 4 ranks.

Context parallel: torch's ring attention (torch.distributed.tensor.experimental.context_parallel) runs on CPU
once its dispatch table maps the CPU SDPA kernel (engines/context_parallel.py: torch 2.13 maps only the CUDA
kernels and raises "Operator aten._scaled_dot_product_flash_attention_for_cpu.default does not have a
sharding strategy registered" without it); `test_torch_alone_lacks_the_cpu_kernel` pins that reason, so the
mapping can go when torch adds it. Under fsdp (cp 2 at 2 ranks, dp 2 × cp 2 at 4), with tp (cp 2 × tp 2) and
in the 4-D layout (pp 2 × cp 2 × tp 2), GPT's position table and Llama's RoPE reading the positions of the
pieces each rank holds."""

from __future__ import annotations

import subprocess
import sys

import pytest

from launcher import torch_compat
from launcher.cli import main
from launcher.io import read_json
from tests.support.layout_parity import assert_same, launch

pytestmark = pytest.mark.torch_dist

TP_CP_REFUSED = torch_compat.tp_cp_refusal("fsdp_tp_cp") is not None
"""This torch predates FSDP over dp × cp of tensor-parallel weights (launcher/torch_compat.py FSDP_TP_CP)."""
needs_tp_cp = pytest.mark.skipif(TP_CP_REFUSED, reason="tp with cp under FSDP needs torch >= 2.10 (refused here)")


def layout_of(tmp, name: str) -> tuple[dict, dict]:
    """(the trial's spec, metrics.layout) of a launched trial's record."""
    record = read_json(tmp / name / "record.json")
    return record["trial"], record["metrics"]["layout"]


@pytest.mark.parametrize(
    "ranks,shard,micro,replicate",
    [(2, 2, 4, 1), (2, 1, 4, 2), (4, 2, 2, 2)],
    ids=["2ranks-shard2", "2ranks-shard1", "4ranks-2x2"],
)
def test_hsdp_equals_reference(parity_ref, tmp_path, ranks, shard, micro, replicate):
    over = ["parallel=hsdp", f"parallel.shard={shard}", f"batch.micro={micro}"]
    assert_same(launch(tmp_path, "hsdp", ranks, over), parity_ref)
    trial, layout = layout_of(tmp_path, "hsdp")
    assert (trial["dp"], trial["shard"]) == (ranks, shard)
    assert (layout["shard"], layout["replicate"]) == (shard, replicate)
    assert layout["fsdp_collective_time_s"] >= 0


@pytest.mark.parametrize(
    "ranks,layout,over",
    [
        (2, "fsdp_cp", ["batch.micro=8"]),
        (4, "fsdp_cp", ["batch.micro=4"]),
        pytest.param(4, "fsdp_tp_cp", ["parallel.tp=2", "batch.micro=8"], marks=needs_tp_cp),
        # Full checkpointing replays each block, RoPE and the forward ring with it, in backward.
        (2, "fsdp_cp", ["batch.micro=8", "model.activation_checkpointing=full"]),
    ],
    ids=["fsdp_cp-2", "fsdp_cp-4", "fsdp_tp_cp-4", "fsdp_cp-2-full-checkpointing"],
)
def test_context_parallel_equals_reference(parity_ref, tmp_path, ranks, layout, over):
    assert_same(launch(tmp_path, layout, ranks, [f"parallel={layout}", "parallel.cp=2", *over]), parity_ref)
    trial, metrics = layout_of(tmp_path, layout)
    assert (trial["cp"], trial["dp"] * trial["cp"] * trial["tp"]) == (2, ranks)
    assert metrics["cp"] == 2


@needs_tp_cp
def test_four_d_layout_equals_reference(parity_ref, tmp_path):
    """fsdp_tp_pp_cp on 8 ranks: 2 pipeline stages, each tensor-parallel over 2 ranks and running the
    ring over 2 more (dp 1): every stage's pieces of the sequence cross the pipeline as they are."""
    over = ["parallel=fsdp_tp_pp_cp", "parallel.tp=2", "parallel.pp=2", "parallel.cp=2", "parallel.microbatches=2"]
    assert_same(launch(tmp_path, "fsdp_tp_pp_cp", 8, over), parity_ref)
    trial = read_json(tmp_path / "fsdp_tp_pp_cp" / "record.json")["trial"]
    assert (trial["dp"], trial["pp"], trial["cp"], trial["tp"]) == (1, 2, 2, 2)


@pytest.mark.parametrize("layout", ["fsdp_tp_cp", "fsdp_tp_pp_cp"])
def test_tp_with_cp_is_refused_on_torch_before_2_10_in_one_line(layout, tmp_path, capsys, monkeypatch):
    """On such torch (the floor, 2.9) the sweep stops at config validation, before any rank starts. Run on every
    torch: the installed version is the floor's here (on the floor itself it is so already)."""
    monkeypatch.setattr(torch_compat, "torch_version", lambda: (2, 9, 1))
    over = [f"parallel={layout}", "parallel.tp=2", "parallel.cp=2", *(["parallel.pp=2"] if "pp" in layout else [])]
    assert main(["sweep", *over, f"sweep.results_dir={tmp_path}", "--quiet"]) == 2
    assert capsys.readouterr().err == f"launcher: error: {torch_compat.tp_cp_refusal(layout)}\n"
    assert list(tmp_path.iterdir()) == []


def test_context_parallel_llama_rope_equals_reference(llama_parity_ref, tmp_path):
    """RoPE rotates by the global positions of the pieces a rank holds (head and tail chunks); the
    recipe's grouped-query attention (8 heads, 4 kv heads) rides the ring as it is."""
    model = ["model=tiny_llama", "model.n_layers=4"]  # BASE's 4 layers: the session's llama reference
    run = launch(tmp_path, "llama_cp", 2, ["parallel=fsdp_cp", "parallel.cp=2", "batch.micro=8", *model])
    assert_same(run, llama_parity_ref, model=model)


TORCH_ALONE = r"""
import os, torch, torch.distributed as dist, torch.nn.functional as F
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.tensor.experimental import context_parallel
os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT="0")
dist.init_process_group("gloo", rank=0, world_size=1, store=dist.HashStore())
q = torch.randn(1, 2, 8, 4)
try:
    with context_parallel(init_device_mesh("cpu", (1,)), buffers=[q], buffer_seq_dims=[2], no_restore_buffers={q}):
        F.scaled_dot_product_attention(q, q, q, is_causal=True)
except NotImplementedError as exc:
    print(exc)
"""


def test_torch_alone_lacks_the_cpu_kernel():
    """Why engines/context_parallel.py maps the CPU kernel: torch's own table does not (yet)."""
    out = subprocess.run([sys.executable, "-c", TORCH_ALONE], capture_output=True, text=True, timeout=120)
    assert "aten._scaled_dot_product_flash_attention_for_cpu.default does not have a sharding strategy" in out.stdout
