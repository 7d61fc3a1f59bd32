"""Tensor parallel (Megatron-style, on DTensor) over the "tp" mesh dim, with sequence parallelism.

Plan per block (GPT's and Llama's alike): the norms run sequence-parallel (activations sharded
on the sequence dim between blocks); attention and feed-forward gather the sequence
(all-gather), split the work by columns (q, k, v: whole query and key/value heads per rank; the
ffn's input Linears — GPT's first, SwiGLU's w1 and w3 — whole hidden units per rank), and
reduce-scatter back to sequence shards after the row-split output Linear (attn proj; GPT's
second ffn Linear, SwiGLU's w2). The token and position embeddings are split by rows and
reduce-scatter straight into sequence shards; the head is split by columns (vocabulary) and the
loss is computed on the vocabulary-sharded logits with `loss_parallel` (no full-logit gather).

`apply_tensor_parallel` is shared with the FSDP×TP layout (fsdp.py) and applies to a pipeline
stage too (its docstring gives the stage contract).
"""

from __future__ import annotations

import statistics
import time
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn
from torch.distributed.tensor import DTensor, Replicate, Shard
from torch.distributed.tensor.parallel import (
    ColwiseParallel,
    PrepareModuleInput,
    RowwiseParallel,
    SequenceParallel,
    loss_parallel,
    parallelize_module,
)
from torch.utils._python_dispatch import TorchDispatchMode

from launcher.config.schema import LauncherConfig
from launcher.train.dist import sync
from launcher.train.engines.base import Engine, Topology, autocast
from launcher.train.models import MLPBlock, PreNormBlock, SwiGLU, TokenModel, materialise

MEASURE_ITERS = 3


def apply_tensor_parallel(model: nn.Module, tp_mesh) -> nn.Module:
    """Parallelize `model` in place over the 1-D `tp_mesh`: a TokenModel, or a pipeline
    StageModule (engines/stages.py), whose top-level pieces are planned only where it holds them.

    Contract, per tp rank (rank r of tp; the sequence split is tp equal contiguous chunks):
    - holding `tok_emb` (the full model, a first stage): input = the full token ids [b, t], the
      same on every tp rank;
    - not holding it (a later stage): input = this rank's sequence shard of the hidden states, a
      plain tensor [b, t/tp, d] (positions r·t/tp … (r+1)·t/tp − 1) — what the previous stage's
      same tp rank returned;
    - not holding `head` (an earlier stage): output = this rank's sequence shard, a plain tensor
      [b, t/tp, d];
    - holding `head` (the full model, a last stage): output = the logits as a DTensor sharded on
      the vocabulary dim (Shard(-1)) over `tp_mesh`: compute the loss under `loss_parallel()`.
    Between blocks every hidden state is such a sequence shard; each attention and feed-forward
    gathers the full sequence (RoPE sees true positions) and reduce-scatters back."""
    top: dict[str, Any] = {}
    if getattr(model, "tok_emb", None) is not None:
        # Row-split table; the partial sums are reduce-scattered into sequence shards.
        top["tok_emb"] = RowwiseParallel(input_layouts=Replicate(), output_layouts=Shard(1))
    if getattr(model, "pos_emb", None) is not None:
        # Positions are [seq] → [seq, d]: the sequence is dim 0 here (broadcasts over batch).
        top["pos_emb"] = RowwiseParallel(input_layouts=Replicate(), output_layouts=Shard(0))
    if getattr(model, "ln_f", None) is not None:
        top["ln_f"] = SequenceParallel()
    if getattr(model, "head", None) is not None:
        top["head"] = ColwiseParallel(input_layouts=Shard(1), output_layouts=Shard(-1), use_local_output=False)
    if top:
        parallelize_module(model, tp_mesh, top)
    blocks = model.blocks.values() if isinstance(model.blocks, nn.ModuleDict) else model.blocks
    for block in blocks:
        parallelize_module(block, tp_mesh, block_plan(block))
    return model


def block_plan(block: nn.Module) -> dict[str, Any]:
    """One block's plan: norms sequence-parallel; attention's q, k, v (whole q and kv heads per
    rank) and the feed-forward's input Linears (whole hidden units) split by columns, their output
    Linears by rows, reduce-scattered into sequence shards."""
    gather_seq = PrepareModuleInput(input_layouts=(Shard(1),), desired_input_layouts=(Replicate(),))
    if isinstance(block, PreNormBlock):
        plan: dict[str, Any] = {
            "ln1": SequenceParallel(),
            "attn": gather_seq,
            "attn.q": ColwiseParallel(),
            "attn.k": ColwiseParallel(),
            "attn.v": ColwiseParallel(),
            "attn.proj": RowwiseParallel(output_layouts=Shard(1)),
            "ln2": SequenceParallel(),
        }
    elif isinstance(block, MLPBlock):
        plan = {"ln": SequenceParallel()}
    else:
        raise TypeError(f"tensor parallel has no plan for {type(block).__name__}")
    plan["ffn"] = gather_seq
    if isinstance(block.ffn, SwiGLU):
        plan |= {
            "ffn.w1": ColwiseParallel(),
            "ffn.w3": ColwiseParallel(),
            "ffn.w2": RowwiseParallel(output_layouts=Shard(1)),
        }
    else:
        plan |= {"ffn.0": ColwiseParallel(), "ffn.2": RowwiseParallel(output_layouts=Shard(1))}
    return plan


def mixed_params(params) -> bool:
    """True where parameters mix DTensor and plain tensors (a foreach optimizer rejects that)."""
    kinds = {isinstance(p, DTensor) for p in params}
    return len(kinds) > 1


def cross_entropy(logits: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """Mean cross-entropy; works for plain logits and for vocabulary-sharded DTensor logits
    (call inside `loss_parallel()`)."""
    return F.cross_entropy(logits.float().reshape(-1, logits.shape[-1]), y.reshape(-1))


def local_scalar(loss: torch.Tensor) -> torch.Tensor:
    """A detached plain scalar from a loss that may be a replicated DTensor."""
    loss = loss.detach()
    return loss.to_local() if isinstance(loss, DTensor) else loss


NOT_COLLECTIVES = ("wait_tensor", "_wrap_tensor_autograd")


class CollectiveTimer(TorchDispatchMode):
    """Times DTensor's collectives: functional collectives (`_c10d_functional.*`, what DTensor
    redistribution and the tensor-parallel styles issue) are asynchronous, so the time charged to
    communication is each collective's launch plus its `wait_tensor` (the time the rank is
    blocked on it). On CUDA, where a wait only orders streams, the device is synchronised
    before and after each collective so the host clock sees it (measurement passes only).
    FSDP2's own `c10d.*` process-group calls are not seen here."""

    def __init__(self, device: torch.device) -> None:
        super().__init__()
        self.device = device
        self.seconds = 0.0
        self.count = 0
        self.nbytes = 0  # full-tensor bytes of the collectives, an all-reduce twice (its ring moves twice)

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if any(issubclass(t, DTensor) for t in types):
            # Modes run before tensor subclasses: hand DTensor ops to DTensor, so that the
            # collectives it issues inside them (loss_parallel's all-reduces, implicit
            # redistributions) come back here as plain-tensor ops (as CommDebugMode does).
            return NotImplemented
        if isinstance(func, torch._ops.HigherOrderOperator) or func.namespace != "_c10d_functional":
            return func(*args, **(kwargs or {}))
        sync(self.device)
        start = time.perf_counter()
        out = func(*args, **(kwargs or {}))
        sync(self.device)
        self.seconds += time.perf_counter() - start
        name = func.__name__.split(".")[0]
        self.count += name not in NOT_COLLECTIVES
        if name not in NOT_COLLECTIVES:
            tensors = [t for t in (args[0] if args else None, out) if isinstance(t, torch.Tensor)]
            sizes = [t.numel() * t.element_size() for t in tensors]
            self.nbytes += max(sizes, default=0) * (2 if name.startswith("all_reduce") else 1)
        return out


def sync_partial_grads(model: nn.Module) -> None:
    """Give every DTensor gradient its parameter's placements. Under sequence parallelism the
    LayerNorm gradients come out of backward as Partial(sum) (each rank saw only its sequence
    shard); left so, every optimizer op touching them would all-reduce again (and a nonlinear
    one, like Adam's grad², needs the reduced value). One all-reduce each here, once per step.
    Replicate → Shard (the row-split embeddings' gradients) is a local slice, no communication."""
    with torch.no_grad():
        for p in model.parameters():
            g = p.grad
            if isinstance(g, DTensor) and isinstance(p, DTensor) and g.placements != p.placements:
                p.grad = g.redistribute(p.device_mesh, p.placements)


class TPEngine(Engine):
    def __init__(self, model: TokenModel, topo: Topology, cfg: LauncherConfig, device: torch.device) -> None:
        self.model, self.cfg, self.device, self.topo = model, cfg, device, topo
        apply_tensor_parallel(model, topo.mesh["tp"])
        materialise(model, device, seed=cfg.seed)  # parallelised on meta: only this rank's shards are allocated
        # Every parameter is a DTensor under this plan; a foreach optimizer is only refused a mix.
        self.foreach_optimizer = not mixed_params(model.parameters())
        self._accum = 1
        self._last_batch: torch.Tensor | None = None

    def parameters(self):
        return self.model.parameters()

    def _micro_step(self, batch: torch.Tensor, accum: int) -> torch.Tensor:
        x, y = batch[:, :-1], batch[:, 1:]
        with autocast(self.cfg, self.device):
            logits = self.model(x)
        with loss_parallel():  # cross-entropy on vocabulary-sharded logits, backward included
            loss = cross_entropy(logits, y) / accum
            loss.backward()
        return local_scalar(loss)

    def _sync_grads(self) -> None:
        sync_partial_grads(self.model)

    def forward_backward(self, micro_batches):
        # No data parallelism: every tp rank runs the same micro-batches (the loop gives tp ranks
        # of one dp replica identical batches); gradients accumulate across micro-steps and the
        # sequence-parallel LayerNorms' partial gradients are reduced once at the end.
        accum = len(micro_batches)
        loss = torch.zeros((), device=self.device)
        for batch in micro_batches:
            loss += self._micro_step(batch.to(self.device, non_blocking=True), accum)
        self._sync_grads()
        self._accum, self._last_batch = accum, micro_batches[-1]
        return loss

    def checkpoint_module(self):
        return self.model

    def full_state_dict(self):
        return gather_full_state(self.model)

    def metrics(self) -> dict[str, Any]:
        seconds, count = tp_collective_seconds(self)
        return {"tp": self.topo.tp, "collective_time_s": seconds, "tp_collectives_per_step": count}


def tp_collective_seconds(engine) -> tuple[float, int]:
    """(seconds, collectives) of tensor parallelism per optimizer step, measured after training:
    a few extra forward+backward passes of the engine's last micro-batch run under
    CollectiveTimer (median taken), times the micro-steps per optimizer step, plus the timed
    end-of-step gradient sync (`engine._sync_grads()`, where the engine has one). Every rank runs
    the same passes (collective). Gradients are discarded; parameters are not touched. Needs
    `engine._micro_step(batch, accum)`, `_last_batch`, `_accum`, `model`, `topo`, `device`."""
    if engine.topo.tp < 2 or engine._last_batch is None:
        return 0.0, 0
    sync_step = getattr(engine, "_sync_grads", lambda: None)
    passes, syncs, count = [], [], 0
    for _ in range(MEASURE_ITERS):
        # Each pass starts from no gradients, as a real step does after zero_grad(set_to_none):
        # a Partial gradient accumulated into a Replicate one would be all-reduced on the spot.
        engine.model.zero_grad(set_to_none=True)
        pass_timer, sync_timer = CollectiveTimer(engine.device), CollectiveTimer(engine.device)
        sync(engine.device)
        with pass_timer:
            engine._micro_step(engine._last_batch.to(engine.device), 1)
        with sync_timer:
            sync_step()
        sync(engine.device)
        passes.append(pass_timer.seconds)
        syncs.append(sync_timer.seconds)
        count = pass_timer.count * engine._accum + sync_timer.count
        # Read by measure.py into the record (tp_collective_bytes_per_step), for the model's link fit.
        engine.tp_collective_bytes = pass_timer.nbytes * engine._accum + sync_timer.nbytes
    engine.model.zero_grad(set_to_none=True)
    return statistics.median(passes) * engine._accum + statistics.median(syncs), count


def gather_full_state(model: nn.Module) -> dict[str, torch.Tensor] | None:
    """Full parameters under the reference names on global rank 0 (None elsewhere). Collective:
    every DTensor is gathered with full_tensor() on every rank."""
    full = {}
    for name, value in model.state_dict().items():
        if isinstance(value, DTensor):
            value = value.full_tensor()
        full[name] = value.detach().cpu()
    return full if torch.distributed.get_rank() == 0 else None


ENGINE = TPEngine
"""The engine the layouts whose row names this module run (launcher/layouts.py)."""
