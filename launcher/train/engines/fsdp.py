"""Fully sharded data parallel (FSDP2 `fully_shard`), alone (layout fsdp) or over tensor
parallel (layout fsdp_tp: TP on the "tp" mesh dim first, then FSDP over the "dp" dim — the 2-D
pattern of torchtitan); as HSDP (layout hsdp: a (replicate, shard) mesh, FSDP2 shards inside a
shard group and all-reduces across replicas); with context parallelism (fsdp_cp, fsdp_tp_cp: each
sequence split over the "cp" dim, engines/context_parallel.py, and FSDP over dp × cp).

Each block is one FSDP unit and the root holds the rest (embeddings, final norm, head). Its
parameters are all-gathered before its forward (and again before its backward when
parallel.reshard_after_forward is true, ≈ ZeRO-3; false keeps them gathered between forward and
backward, ≈ ZeRO-2) and its gradients reduce-scattered (averaged over dp) after the last
micro-step's backward (after every micro-step's with parallel.fsdp_sync_each_microstep).

Communication time is replayed, not timed in place (FSDP overlaps it with compute):
`replay_seconds` times each kind of collective alone on the dp group and multiplies by how often
a step issues it — counted here from the units, and by `CollectiveCounter` under the pipeline's
FSDP layouts (pipeline.py), where the schedule decides how often a unit is gathered.
"""

from __future__ import annotations

import math
import statistics
import time
from collections import Counter
from contextlib import nullcontext
from typing import Any

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import nn
from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict
from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard
from torch.distributed.tensor import DTensor
from torch.distributed.tensor.parallel import loss_parallel

from launcher import torch_compat
from launcher.config.schema import LauncherConfig
from launcher.layouts import traits
from launcher.train.dist import sync
from launcher.train.engines.base import Engine, Topology
from launcher.train.engines.tp import (
    CollectiveTimer,
    apply_tensor_parallel,
    local_scalar,
    mixed_params,
    tp_collective_seconds,
)
from launcher.train.models import is_byo, materialise, reference_values
from launcher.train.models.byo import checkpoint_modules, loss_fn, step_loss, to_device, unit_modules
from launcher.train.models.moe import aux_loss

COMM_WARMUP, COMM_ITERS = 1, 3
# fp8: the float8 linear layers (train/float8.py) cast to fp8 themselves; everything else computes in bf16.
PARAM_DTYPES = {"fp32": None, "bf16": torch.bfloat16, "fp16": torch.float16, "fp8": torch.bfloat16}


def local_numel(p: torch.Tensor) -> int:
    """Elements of `p` on this rank before FSDP sharding (the tp-local piece of a DTensor)."""
    return p.to_local().numel() if isinstance(p, DTensor) else p.numel()


class FSDPEngine(Engine):
    def __init__(self, model: nn.Module, topo: Topology, cfg: LauncherConfig, device: torch.device) -> None:
        self.model, self.cfg, self.device, self.topo = model, cfg, device, topo
        self.tensor_parallel = traits(cfg.parallel.layout).splits("tp")  # fsdp_tp
        self.reshard = bool(cfg.parallel.reshard_after_forward)
        self.sync_each = bool(cfg.parallel.fsdp_sync_each_microstep)
        self.dp_mesh = topo.fsdp_mesh if topo.fsdp_mesh is not None else topo.mesh["dp"]
        self.hsdp = self.dp_mesh.ndim == 2  # (replicate, shard)
        # The group FSDP's all-gathers and reduce-scatters run on: the shard group under hsdp.
        self.group = self.dp_mesh["shard"].get_group() if self.hsdp else self.dp_mesh.get_group()
        self.cp_mesh = topo.mesh["cp"] if topo.cp > 1 else None
        self.param_dtype = PARAM_DTYPES[cfg.precision]
        if self.tensor_parallel:
            apply_tensor_parallel(model, topo.mesh["tp"])
        # The units: each block of a built-in model; a `_target_` model's by class name or size
        # (byo.unit_modules), children before parents.
        units = unit_modules(model, cfg.parallel) if is_byo(cfg.model) else list(model.blocks)
        self.loss = loss_fn(cfg.model) if is_byo(cfg.model) else None
        if is_byo(cfg.model) and cfg.model.activation_checkpointing == "full":
            checkpoint_modules(units)
        # Elements per FSDP unit before sharding (units first, root last; a unit's own, not those
        # of a unit inside it), for the collective replay in metrics() and for comm_numel().
        self.unit_numels, seen = [], set()
        for unit in [*units, model]:
            mine = [p for p in unit.parameters() if id(p) not in seen]
            seen |= {id(p) for p in mine}
            self.unit_numels.append(sum(local_numel(p) for p in mine))

        mp = MixedPrecisionPolicy(param_dtype=self.param_dtype, reduce_dtype=torch.float32)
        self.shard_inner(mp)
        for unit in units:
            fully_shard(unit, mesh=self.dp_mesh, reshard_after_forward=self.reshard, mp_policy=mp)
        # The root is never resharded after forward (as torchtitan does): its backward starts
        # right after forward and would all-gather it straight back.
        fully_shard(model, mesh=self.dp_mesh, reshard_after_forward=False, mp_policy=mp)
        # Sharded on meta (torchtitan's order): only this rank's shards are allocated.
        materialise(model, device, seed=cfg.seed, fallback=reference_values(cfg.model, cfg.seed))
        self.foreach_optimizer = not mixed_params(model.parameters())
        self._accum = 1
        self._last_batch: torch.Tensor | None = None

    def shard_inner(self, mp: MixedPrecisionPolicy) -> None:
        """Shard modules inside the units on a mesh of their own, before the units (engines/ep.py:
        the experts over the ranks holding the same ones); nothing here."""

    def parameters(self):
        return self.model.parameters()

    def _micro_step(self, batch: torch.Tensor | dict[str, torch.Tensor], accum: int) -> torch.Tensor:
        if isinstance(batch, dict):  # a `_target_` model's batch (MixedPrecisionPolicy casts: no autocast)
            loss = step_loss(self.model, batch, self.loss) / accum
            loss.backward()
            return loss.detach()
        x, y = batch[:, :-1], batch[:, 1:]
        if self.cp_mesh is not None:
            return self._cp_micro_step(x, y, accum)
        logits = self.model(x)  # MixedPrecisionPolicy casts parameters; no autocast needed
        with loss_parallel() if self.tensor_parallel else nullcontext():
            ce = F.cross_entropy(logits.float().reshape(-1, logits.shape[-1]), y.reshape(-1))
            loss = (ce + aux_loss(self.model)) / accum  # aux: a MoE model's load-balancing loss, else 0
            loss.backward()
        return local_scalar(loss)

    def _cp_micro_step(self, x: torch.Tensor, y: torch.Tensor, accum: int) -> torch.Tensor:
        """Forward and backward on this cp rank's equal piece of every sequence. The mean over the
        whole sequence is the mean of the cp pieces' means, so FSDP's average over dp × cp is the
        reference's gradient; the loss shown is that mean (a sum over the cp group ÷ cp)."""
        from launcher.train.engines.context_parallel import sequence_shards  # lazy: torch's CP only where cp runs

        with sequence_shards(self.cp_mesh, x, y) as (x, y):
            logits = self.model(x)
            with loss_parallel() if self.tensor_parallel else nullcontext():
                loss = F.cross_entropy(logits.float().reshape(-1, logits.shape[-1]), y.reshape(-1)) / accum
                loss.backward()
        loss = local_scalar(loss).clone()
        dist.all_reduce(loss, group=self.cp_mesh.get_group())
        return loss / self.cp_mesh.size()

    def forward_backward(self, micro_batches):
        accum = len(micro_batches)
        loss = torch.zeros((), device=self.device)
        for k, batch in enumerate(micro_batches):
            # Gradients are reduce-scattered (averaged over dp) on the last micro-step only, kept
            # unsharded until then, or on every one (fsdp_sync_each_microstep: FSDP2 adds each
            # into the sharded gradient); with each loss / accum either is the global-batch mean.
            self.model.set_requires_gradient_sync(self.sync_each or k == accum - 1)
            loss += self._micro_step(to_device(batch, self.device), accum)
        self._accum, self._last_batch = accum, micro_batches[-1]
        return loss

    def checkpoint_module(self):
        return self.model

    def full_state_dict(self):
        full = get_model_state_dict(self.model, options=StateDictOptions(full_state_dict=True, cpu_offload=True))
        return full if dist.get_rank() == 0 else None

    def comm_group(self):
        return self.group

    def comm_numel(self):
        # The unsharded gradient of this rank's (tp-local) parameters: what an all-reduce would
        # move; FSDP's reduce-scatter + all-gather move the same bytes per rank.
        return sum(self.unit_numels)

    def metrics(self) -> dict[str, Any]:
        fsdp_s = self._fsdp_collective_seconds()
        out: dict[str, Any] = {
            "reshard_after_forward": self.reshard,
            "fsdp_sync_each_microstep": self.sync_each,
            "fsdp_collective_time_s": fsdp_s,
        }
        if self.tensor_parallel:
            # DTensor's collectives on the tp dim, timed on extra passes (tp.py). FSDP issues the
            # sequence-parallel LayerNorms' gradient all-reduces in its post-backward of every
            # pass timed here, though only on the last micro-step of a real step: with
            # accumulation that over-counts them by (accum − 1) small [d_model] all-reduces.
            tp_s, count = tp_collective_seconds(self)
            out |= {"tp": self.topo.tp, "tp_collective_time_s": tp_s, "tp_collectives_per_step": count}
            fsdp_s += tp_s
        if self.hsdp:
            out |= {"shard": self.dp_mesh["shard"].size(), "replicate": self.dp_mesh["replicate"].size()}
        if self.cp_mesh is not None:
            out["cp"] = self.cp_mesh.size()
        out["collective_time_s"] = fsdp_s
        return out

    def _fsdp_collective_seconds(self) -> float:
        """FSDP's collectives per optimizer step, replayed on the dp group with this run's sizes.

        FSDP2 issues its all-gathers and reduce-scatters asynchronously and overlaps them with
        compute, so instead of instrumenting them we time the same collectives in isolation after
        training: for each unit, one all-gather of its flat shard in the parameter dtype and one
        reduce-scatter of its unsharded gradient in float32 (medians of COMM_ITERS, each
        barrier-aligned). Per optimizer step a unit is all-gathered once per micro-step for
        forward, once more per micro-step for backward when it resharded after forward (blocks
        with reshard_after_forward; never the root), and reduce-scattered once (gradient sync is
        off on the other micro-steps) or, with fsdp_sync_each_microstep, once per micro-step.
        The sum is the communication time without overlap: an upper bound on what a step exposes.
        (FSDP pads each parameter's dim 0 to a multiple of dp, not the unit's flat size: at most
        dp − 1 rows per parameter of difference.)"""
        ops: Counter[tuple[str, int, torch.dtype]] = Counter()
        for i, numel in enumerate(self.unit_numels):
            is_root = i == len(self.unit_numels) - 1
            ops[("_allgather_base_", numel, self.param_dtype or torch.float32)] += self._accum * (
                2 if self.reshard and not is_root else 1
            )
            ops[("_reduce_scatter_base_", numel, torch.float32)] += self._accum if self.sync_each else 1
        seconds = replay_seconds(ops, self.group, self.device)
        if self.hsdp and self.dp_mesh["replicate"].size() > 1:
            # HSDP: after each reduce-scatter, the gradient shard is all-reduced across the replicas.
            shards = [math.ceil(numel / self.group.size()) for numel in self.unit_numels]
            replicas = self.dp_mesh["replicate"].get_group()
            grad = torch.zeros(sum(shards), dtype=torch.float32, device=self.device)
            per_sync = time_collective(replicas, self.device, lambda: dist.all_reduce(grad, group=replicas))
            seconds += per_sync * (self._accum if self.sync_each else 1)
        return seconds


def time_collective(group, device: torch.device, collective) -> float:
    """Median seconds of `collective()` over COMM_ITERS barrier-aligned runs on `group`, after
    COMM_WARMUP. Collective: every rank of `group` must call it with the same sizes."""
    for _ in range(COMM_WARMUP):
        collective()
    times = []
    for _ in range(COMM_ITERS):
        dist.barrier(group=group)
        sync(device)
        start = time.perf_counter()
        collective()
        sync(device)
        times.append(time.perf_counter() - start)
    return statistics.median(times)


FSDP_OPS = ("_allgather_base_", "_reduce_scatter_base_")
"""The c10d ops FSDP2 moves parameters (all-gather) and gradients (reduce-scatter) with."""


class CollectiveCounter(CollectiveTimer):
    """CollectiveTimer (DTensor's collectives, timed in place) that also counts FSDP2's c10d
    all-gathers and reduce-scatters by (op, elements of the unsharded buffer, dtype), for
    `replay_seconds`. Where a schedule decides how often a unit is gathered (a pipeline's
    microbatches unshard and reshard it as they come), counting is exact where a formula
    would guess; timing them in place would not be: FSDP issues them asynchronously."""

    def __init__(self, device: torch.device) -> None:
        super().__init__(device)
        self.fsdp_ops: Counter[tuple[str, int, torch.dtype]] = Counter()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        name = getattr(func, "__name__", "").split(".")[0]
        if getattr(func, "namespace", None) == "c10d" and name in FSDP_OPS:
            full = max(args[:2], key=lambda t: t.numel())  # (output, input): the unsharded one
            self.fsdp_ops[(name, full.numel(), full.dtype)] += 1
        return super().__torch_dispatch__(func, types, args, kwargs)


def replay_seconds(ops: Counter, group, device: torch.device) -> float:
    """Seconds the counted FSDP collectives take on `group`, each kind timed alone
    (time_collective) times its count: communication without overlap, an upper bound on what
    the steps exposed. Collective: the ranks of `group` counted the same ops (they hold the same
    FSDP units)."""
    n = dist.get_world_size(group)
    if n < 2:
        return 0.0
    total = 0.0
    for (name, numel, dtype), count in sorted(ops.items(), key=str):
        shard = math.ceil(numel / n)
        small = torch.ones(shard, dtype=dtype, device=device)
        big = torch.ones(shard * n, dtype=dtype, device=device)
        if name == "_allgather_base_":
            seconds = time_collective(
                group, device, lambda o=big, i=small: torch_compat.all_gather_single(o, i, group=group)
            )
        else:
            seconds = time_collective(
                group, device, lambda o=small, i=big: torch_compat.reduce_scatter_single(o, i, group=group)
            )
        total += count * seconds
    return total


ENGINE = FSDPEngine
"""The engine the layouts whose row names this module run (launcher/layouts.py)."""
