"""Context parallelism: each sequence split across the "cp" ranks, attention run as torch's ring
attention (torch.distributed.tensor.experimental.context_parallel: every rank keeps its queries
and passes its keys and values around the ring, merging the partial softmaxes by log-sum-exp).

torch's ring attention is its own on every device; what torch 2.13 lacks on CPU is the dispatch
to it: its table maps the CUDA kernels only (flash, memory-efficient, cuDNN), and SDPA on CPU
calls `_scaled_dot_product_flash_attention_for_cpu`, which DTensor then rejects ("Operator
aten._scaled_dot_product_flash_attention_for_cpu.default does not have a sharding strategy
registered"). `_cpu_ring_forward` and `_cpu_ring_backward` map the CPU kernel and its backward
to torch's own ring templates, as its CUDA entries do; on a GPU torch's entries run unchanged.

Positions: a rank holds pieces of every sequence (torch balances the causal work by giving each
rank a head and a tail chunk), so the model reads the positions of the tokens it holds from
SEQUENCE_POSITIONS (the position table and RoPE), sharded exactly as the tokens are.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import torch
from torch.distributed.tensor import DTensor, Shard
from torch.distributed.tensor.experimental import context_parallel

from launcher import torch_compat
from launcher.train.models.common import SEQUENCE_POSITIONS

ring, _handlers = torch_compat.ring_attention()  # torch's private module, moved in 2.10

SEQ_DIM = 2
"""The sequence dim of SDPA's [batch, heads, seq, head_dim] inputs, as torch's ring assumes."""
_aten = torch.ops.aten


def _local(t: torch.Tensor) -> torch.Tensor:
    return t.to_local() if isinstance(t, DTensor) else t


def _sharded(tensors, mesh) -> tuple[DTensor, ...]:
    return tuple(DTensor.from_local(t, mesh, [Shard(SEQ_DIM)], run_check=False) for t in tensors)


def _cpu_ring_forward(op_call, args, kwargs):
    """aten._scaled_dot_product_flash_attention_for_cpu(q, k, v, dropout_p, is_causal, *, attn_mask,
    scale) on sequence-sharded DTensors: torch's ring over the CPU kernel; (out, logsumexp)."""
    q, k, v = args[:3]
    given = dict(zip(("dropout_p", "is_causal"), args[3:])) | kwargs
    if given.get("attn_mask") is not None:
        raise NotImplementedError("context parallel on CPU: SDPA with an attn_mask (the models use is_causal)")
    out = ring._templated_ring_attention(
        q.device_mesh.get_group(),
        SEQ_DIM,
        _aten._scaled_dot_product_flash_attention_for_cpu,
        _local(q),
        _local(k),
        _local(v),
        is_causal=bool(given.get("is_causal", False)),
        dropout_p=given.get("dropout_p", 0.0),
        scale=given.get("scale"),
    )
    return _sharded(out, q.device_mesh)


def _cpu_ring_backward(op_call, args, kwargs):
    """Its backward (grad_out, q, k, v, out, logsumexp, dropout_p, is_causal, *, attn_mask, scale):
    torch's ring backward over the CPU kernel's; (grad q, grad k, grad v)."""
    names = ("grad_out", "query", "key", "value", "out", "logsumexp", "dropout_p", "is_causal")
    a = dict(zip(names, args)) | kwargs
    mesh = a["query"].device_mesh
    grads = ring._templated_ring_attention_backward(
        mesh.get_group(),
        SEQ_DIM,
        _aten._scaled_dot_product_flash_attention_for_cpu_backward.default,
        grad_out=_local(a["grad_out"]),
        grad_out_name="grad_out",
        **{n: _local(a[n]) for n in ("query", "key", "value", "out", "logsumexp")},
        is_causal=bool(a["is_causal"]),
        dropout_p=a["dropout_p"],
        scale=a.get("scale"),
    )
    return _sharded(grads, mesh)


# torch reads this table each time a context_parallel block opens (its _enable_cp_dtensor_dispatcher).
_handlers[_aten._scaled_dot_product_flash_attention_for_cpu.default] = _cpu_ring_forward
_handlers[_aten._scaled_dot_product_flash_attention_for_cpu_backward.default] = _cpu_ring_backward


@contextmanager
def sequence_shards(mesh, x: torch.Tensor, y: torch.Tensor) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
    """Inputs `x` and labels `y` ([batch, seq] each) cut to this cp rank's pieces of every
    sequence, with SEQUENCE_POSITIONS set to their positions and SDPA running as ring attention
    over `mesh` (the "cp" dim), for a forward and backward inside the block."""
    x, y = x.contiguous().clone(), y.contiguous().clone()  # torch resizes the buffers in place
    pos = torch.arange(x.shape[1], device=x.device).unsqueeze(0)
    with context_parallel(mesh, buffers=[x, y, pos], buffer_seq_dims=[1, 1, 1], no_restore_buffers={x, y, pos}):
        token = SEQUENCE_POSITIONS.set(pos[0])
        try:
            yield x, y
        finally:
            SEQUENCE_POSITIONS.reset(token)
