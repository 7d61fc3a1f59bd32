"""Pipeline parallel with torch.distributed.pipelining: `pipeline` (all ranks are stages),
`dp_pp` (DDP over the dp dim of each stage), `fsdp_pp` (each stage fully_shard-ed over dp) and
`fsdp_tp_pp` (3-D: each stage tensor-parallel over tp, then fully_shard-ed over dp — the order
torchtitan uses; ranks dp × pp × tp with tp innermost, so a stage's tp group is adjacent ranks).

What crosses between stages under fsdp_tp_pp: each tp rank sends its own sequence shard,
[microbatch, seq_len / tp, d_model], as a plain tensor to the same tp rank of the next stage
(the pp group of a (dp, tp) coordinate). Between blocks, sequence-parallel activations are
sharded on the sequence already, so no all-gather is needed before a send and none after a
receive (the next stage's first norm runs sequence-parallel on the shard); each link carries
1/tp of the activation, as Megatron's scatter-gather optimisation does. Gradients come back
the same way. Only the first stage sees token ids (full on every tp rank) and only the last
makes logits, vocabulary-sharded: its loss runs under `loss_parallel` (the whole schedule step
does, since torch runs the last stage's loss and its backward inside the schedule).

Gradient semantics. The loop wants gradients of the mean loss over the global batch
(micro × accum × dp samples). Each optimizer step runs `accum` schedule steps of m pipeline
microbatches each. torch's default (`scale_grads=True`) divides EVERY parameter's `.grad` by m
at the end of each schedule step — including what earlier schedule steps accumulated, so with
accumulation the first micro-step would end up divided by m², the second by m. Instead the
schedules here run with `scale_grads=False` and the loss function returns
cross_entropy / (m × accum): plain summation across microbatches and schedule steps then gives
the mean over this replica's samples, and DDP/FSDP's averaging over dp the global mean.

Accumulation with data parallelism: gradient sync (DDP's all-reduce, FSDP's reduce-scatter)
happens only in the last schedule step of an optimizer step. The stage subclass below passes
`last_backward=False` to torch's DDP/FSDP glue on earlier steps and skips their
`perform_reduce_grad` (FSDP's post-backward reduce-scatter), so gradients accumulate locally
(FSDP: unsharded, with requires_gradient_sync(False)) and are reduced once.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager, nullcontext
from typing import Any

import torch
import torch.distributed as dist
from torch import nn
from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard
from torch.distributed.pipelining import PipelineStage, Schedule1F1B, ScheduleGPipe, ScheduleInterleaved1F1B
from torch.distributed.tensor import DTensor
from torch.distributed.tensor.parallel import loss_parallel
from torch.nn.parallel import DistributedDataParallel as DDP

from launcher import torch_compat
from launcher.config.schema import LauncherConfig
from launcher.layouts import DataParallel, traits
from launcher.train.dist import sync
from launcher.train.engines.base import Engine, Topology, autocast
from launcher.train.engines.fsdp import PARAM_DTYPES, CollectiveCounter, local_numel, replay_seconds
from launcher.train.engines.stages import StageModule, rank_stages
from launcher.train.engines.tp import apply_tensor_parallel, cross_entropy, local_scalar, mixed_params
from launcher.train.models import TokenModel, materialise
from launcher.trials.layout import pipeline_bubble, virtual_stages

BUBBLE_STEPS = 2
"""Optimizer steps of the instrumented pass that measures the bubble, after the timed steps."""


class _RunState:
    """What the engine shares with its stages: the busy clock, whether it runs (only in the
    instrumented pass, never in the timed steps), and whether this schedule step is the last of
    the optimizer step (the one that synchronises gradients over dp)."""

    def __init__(self, device: torch.device) -> None:
        self.device = device
        self.busy_s = 0.0
        self.instrumented = False
        self.sync_grads = True

    @contextmanager
    def busy(self):
        if not self.instrumented:
            yield
            return
        # On CUDA the device is synchronised around each section so that host timers measure
        # the kernels, not their launch; that stalls the pipeline, hence only in the
        # instrumented pass. On CPU `sync` is a no-op.
        sync(self.device)
        start = time.perf_counter()
        try:
            yield
        finally:
            sync(self.device)
            self.busy_s += time.perf_counter() - start


class _Stage(PipelineStage):
    """A PipelineStage that times its own compute and defers dp gradient sync to the last
    schedule step of an optimizer step (see the module docstring)."""

    def __init__(
        self,
        submodule: nn.Module,
        stage_index: int,
        num_stages: int,
        device: torch.device,
        *,
        group: Any,
        state: _RunState,
    ) -> None:
        super().__init__(submodule, stage_index, num_stages, device, group=group)
        self._state = state

    def _compute_outputs(self, *args, module: nn.Module, **kwargs):
        # torch's one-off shape inference runs a real forward through the submodule with grad
        # enabled. Through DDP outside no_sync() that arms DDP's reducer (prepare_for_backward),
        # and the next backward — any microbatch's, under no_sync or not — then all-reduces and
        # records its gradient order; with interleaved 1F1B a second, real sync backward follows
        # before any forward and DDP's bucket rebuild fails ("rebuilt parameter indices size is
        # not same as original model parameters size"). Shape inference needs no grad sync.
        if isinstance(module, DDP):
            with module.no_sync():
                return super()._compute_outputs(*args, module=module, **kwargs)
        return super()._compute_outputs(*args, module=module, **kwargs)

    def _get_init_p2p_neighbors_ops(self) -> list[dist.P2POp]:
        ops = super()._get_init_p2p_neighbors_ops()
        if torch_compat.pipeline_init_sends_int64():  # torch < 2.10 sends int64 into a float32 receive
            for op in ops:
                op.tensor = op.tensor.float()
        return ops

    def forward_maybe_with_nosync(self, *args, **kwargs):
        with self._state.busy():
            return super().forward_maybe_with_nosync(*args, **kwargs)

    def backward_maybe_with_nosync(self, backward_type, bwd_kwargs: dict, last_backward: bool = False):
        with self._state.busy():
            return super().backward_maybe_with_nosync(
                backward_type, bwd_kwargs, last_backward=last_backward and self._state.sync_grads
            )

    def perform_reduce_grad(self, grad_scale_factor: int) -> None:
        if grad_scale_factor != 1:
            raise AssertionError("schedules run with scale_grads=False; the loss carries the 1/(m·accum)")
        if self._state.sync_grads:
            super().perform_reduce_grad(grad_scale_factor)


class PipelineEngine(Engine):
    def __init__(self, model: TokenModel, topo: Topology, cfg: LauncherConfig, device: torch.device) -> None:
        par = cfg.parallel
        row = traits(par.layout)
        self.tensor_parallel = row.splits("tp")  # fsdp_tp_pp
        self.data_parallel = row.data_parallel  # none: pipeline; ddp: dp_pp; fsdp: fsdp_pp, fsdp_tp_pp
        self.fsdp = self.data_parallel == DataParallel.fsdp
        if topo.tp != 1 and not self.tensor_parallel:
            raise ValueError(f"parallel.layout={par.layout} does not combine with tensor parallel (tp={topo.tp})")
        self.cfg, self.device, self.topo = cfg, device, topo
        self.layout, self.schedule_name = par.layout, par.schedule
        self.pp, self.m = topo.pp, par.microbatches
        self.v = virtual_stages(par)
        self.n_stages = self.pp * self.v
        self.pp_group = topo.mesh["pp"].get_group()
        self.dp_group = topo.mesh["dp"].get_group()
        self.stage_ids = rank_stages(topo.pp_rank, self.pp, self.v)
        self.modules = [
            StageModule(model, s, self.n_stages, autocast=lambda: autocast(cfg, device)) for s in self.stage_ids
        ]
        self.has_first = any(mod.is_first for mod in self.modules)
        self.has_last = any(mod.is_last for mod in self.modules)
        self._stage_numel = 0  # this rank's stages' elements before dp sharding (tp-local under TP), set in _wrap
        # The loop builds the model on the meta device: only this rank's stages are ever
        # allocated (each in _wrap); the other stages' parameters stay meta, costing nothing.
        self.wrapped = [self._wrap(mod) for mod in self.modules]
        self.foreach_optimizer = not mixed_params(self.parameters())
        self._state = _RunState(device)
        stages = [
            _Stage(w, s, self.n_stages, device, group=self.pp_group, state=self._state)
            for w, s in zip(self.wrapped, self.stage_ids, strict=True)
        ]
        kwargs = {"n_microbatches": self.m, "loss_fn": self._loss, "scale_grads": False}
        if par.schedule == "gpipe":
            self.schedule = ScheduleGPipe(stages[0], **kwargs)
        elif par.schedule == "1f1b":
            self.schedule = Schedule1F1B(stages[0], **kwargs)
        elif par.schedule == "interleaved_1f1b":
            self.schedule = ScheduleInterleaved1F1B(stages, **kwargs)
        else:
            raise ValueError(f"parallel.schedule={par.schedule} is not a pipeline schedule")
        self._accum = 1
        self._activation_numel = 0
        self._last_batches: list[torch.Tensor] = []  # the last timed step's, replayed by the instrumented pass
        self._steps: list[tuple[float, float]] = []  # (busy s, wall s) per instrumented optimizer step
        # Per optimizer step: (FSDP s, TP s, TP collectives), measured after the bubble (fsdp layouts)
        self._collectives: tuple[float, float, int] | None = None

    def _wrap(self, mod: StageModule) -> nn.Module:
        """Parallelise this stage on the meta device (TP over tp, then FSDP over dp), materialise
        it (only this rank's shards are allocated, with the reference values) and wrap it for
        DDP under dp_pp."""
        if self.tensor_parallel:
            apply_tensor_parallel(mod, self.topo.mesh["tp"])
        self._stage_numel += sum(local_numel(p) for p in mod.parameters())
        if self.fsdp:
            mesh, reshard = self.topo.fsdp_mesh, self.cfg.parallel.reshard_after_forward  # dp × cp under cp
            # As plain fsdp (fsdp.py): parameters gathered and computed in the run's precision
            # (bf16 all-gathers move half the bytes of fp32), gradients reduced in fp32.
            mp = MixedPrecisionPolicy(param_dtype=PARAM_DTYPES[self.cfg.precision], reduce_dtype=torch.float32)
            for block in mod.blocks.values():
                fully_shard(block, mesh=mesh, reshard_after_forward=reshard, mp_policy=mp)
            fully_shard(mod, mesh=mesh, reshard_after_forward=reshard, mp_policy=mp)
        materialise(mod, self.device, seed=self.cfg.seed)
        if self.data_parallel == DataParallel.ddp:
            ids = [self.device.index] if self.device.type == "cuda" else None
            return DDP(mod, device_ids=ids, process_group=self.dp_group)
        return mod

    def _loss(self, logits: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
        # Scaled so that summing over m microbatches × accum schedule steps gives the mean. Under
        # TP the logits are vocabulary-sharded and this runs inside the step's loss_parallel.
        with self._state.busy():
            loss = cross_entropy(logits, target)
        return loss / (self.m * self._accum)

    def parameters(self):
        return [p for w in self.wrapped for p in w.parameters()]

    def forward_backward(self, micro_batches):
        self._last_batches = micro_batches
        return self._schedule_steps(micro_batches)

    def _instrumented_step(self, micro_batches):
        """One optimizer step's schedule steps with the busy clock on, its (busy, wall) kept."""
        busy0 = self._state.busy_s
        sync(self.device)
        start = time.perf_counter()
        loss = self._schedule_steps(micro_batches)
        sync(self.device)
        self._steps.append((self._state.busy_s - busy0, time.perf_counter() - start))
        return loss

    def _schedule_steps(self, micro_batches):
        accum = len(micro_batches)
        self._accum = accum
        total = torch.zeros((), device=self.device)
        for k, batch in enumerate(micro_batches):
            batch = batch.to(self.device, non_blocking=True)
            self._state.sync_grads = k == accum - 1
            losses: list[torch.Tensor] = []
            # The last stage's loss and its backward run inside step(): the vocabulary-parallel
            # cross-entropy needs loss_parallel around both.
            with loss_parallel() if self.tensor_parallel else nullcontext(), self._pieces(batch) as (x, y):
                if not self._activation_numel:
                    # Under TP each send carries this rank's sequence shard (module docstring).
                    self._activation_numel = (
                        (x.shape[0] // self.m) * x.shape[1] * self.cfg.model.d_model // self.topo.tp
                    )
                args = (x,) if self.has_first else ()
                kwargs: dict[str, Any] = {"target": y, "losses": losses} if self.has_last else {}
                self.schedule.step(*args, **kwargs, **torch_compat.schedule_step_options())
            if self.has_last:
                total += torch.stack([local_scalar(loss) for loss in losses]).sum()
        self._state.sync_grads = True
        if self.has_last and self.topo.cp > 1:  # the mean over the cp ranks' equal pieces of each sequence
            dist.all_reduce(total, group=self.topo.mesh["cp"].get_group())
            total /= self.topo.cp
        return total if self.has_last else None

    @contextmanager
    def _pieces(self, batch: torch.Tensor) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
        """Inputs and labels of `batch`; under context parallel (fsdp_tp_pp_cp) this cp rank's pieces of
        every sequence, SDPA running as ring attention for the schedule step (engines/context_parallel.py)."""
        x, y = batch[:, :-1], batch[:, 1:]
        if torch_compat.pipeline_checks_input_strides():  # torch < 2.12 refuses the view's strides
            x = x.contiguous()
        if self.topo.cp == 1:
            yield x, y
            return
        from launcher.train.engines.context_parallel import sequence_shards  # lazy: torch's CP only where cp runs

        with sequence_shards(self.topo.mesh["cp"], x, y) as pieces:
            yield pieces

    def measure_bubble(self, steps: int = BUBBLE_STEPS) -> None:
        """The instrumented pass: `steps` more optimizer steps' forward and backward on the last
        timed step's micro-batches, each stage chunk timed (with a device sync around it on
        CUDA); under fsdp_pp and fsdp_tp_pp then as many steps again with the collectives
        counted and timed (_measure_collectives: kept apart from the bubble steps, whose compute
        its dispatch mode would slow). Gradients are dropped after: parameters stay those of the
        timed steps. Collective."""
        if self._steps or not self._last_batches:
            return
        self._state.instrumented = True
        try:
            for _ in range(steps):
                self._instrumented_step(self._last_batches)
        finally:
            self._state.instrumented = False
        try:
            if self.fsdp:
                self._collectives = self._measure_collectives(steps)
        finally:
            for p in self.parameters():
                p.grad = None

    def _measure_collectives(self, steps: int) -> tuple[float, float, int]:
        """(FSDP seconds, TP seconds, TP collectives) per optimizer step on this rank, over
        `steps` more optimizer steps. TP: DTensor's collectives timed in place (tp.CollectiveTimer)
        — the stages' sequence all-gathers and reduce-scatters, the loss's all-reduces (last
        stage) and FSDP's all-reduce of the sequence-parallel norms' Partial gradients over tp.
        FSDP: its all-gathers and reduce-scatters over dp counted as the schedule issues them
        (which microbatch unshards a unit again depends on the schedule) and replayed on the
        dp group (fsdp.replay_seconds). The pipeline's send/recv is neither."""
        counter = CollectiveCounter(self.device)
        with counter:
            for _ in range(steps):
                self._schedule_steps(self._last_batches)
        fsdp_s = replay_seconds(counter.fsdp_ops, self.dp_group, self.device)
        self.tp_collective_bytes = round(counter.nbytes / steps) if self.tensor_parallel else None  # for measure.py
        return fsdp_s / steps, counter.seconds / steps, round(counter.count / steps)

    def full_state_dict(self):
        mine: dict[str, torch.Tensor] = {}
        for mod in self.modules:
            for name, t in mod.state_dict().items():
                if isinstance(t, DTensor):
                    t = t.full_tensor()  # collective over this stage's dp (and tp) ranks, same order on each
                mine[name] = t.detach().cpu().clone()
        contribute = self.topo.dp_rank == 0 and self.topo.tp_rank == 0
        rank0 = dist.get_rank() == 0
        gathered: list[Any] = [None] * dist.get_world_size() if rank0 else None  # type: ignore[assignment]
        dist.gather_object(mine if contribute else {}, gathered, dst=0)
        if not rank0:
            return None
        full: dict[str, torch.Tensor] = {}
        for part in gathered:
            full.update(part)
        return full

    def grad_norm_group(self):
        return self.pp_group  # each stage's parameters are its own: their squares add over pp

    def comm_group(self):
        return self.pp_group if self.data_parallel == DataParallel.none else self.dp_group

    def comm_numel(self):
        # dp_pp / fsdp_pp / fsdp_tp_pp: this stage's (tp-local) gradient, all-reduced (DDP) or
        # reduce-scattered (FSDP) over dp. pipeline: one microbatch's activation, the size of
        # each send between stages.
        return self._activation_numel if self.data_parallel == DataParallel.none else self._stage_numel

    def metrics(self) -> dict[str, Any]:
        """Bubble: theory (p−1)/(v·m+p−1), and measured on this rank as 1 − busy ÷ wall, summed
        over the BUBBLE_STEPS steps of the instrumented pass that runs after the timed steps
        (measure_bubble, run here on first call: collective, so every rank calls metrics(), as
        measure.gather_ranks does). The timed steps run uninstrumented: a sync around each stage
        chunk would stall the pipeline they measure. wall: from the start of the step's first
        schedule step to the end of its last. busy: time inside this rank's own
        stage compute — each forward_one_chunk's module call (PipelineStage.
        forward_maybe_with_nosync), each backward_one_chunk's autograd call
        (backward_maybe_with_nosync) and the last stage's loss — timed by overriding those
        PipelineStage methods. Everything else (waiting on send/recv, schedule bookkeeping, FSDP's
        final reduce-scatter) counts as idle. For dp_pp/fsdp_pp/fsdp_tp_pp, busy includes
        collectives that run inside those calls (DDP's all-reduce in the last backward, FSDP's
        all-gathers, tensor parallel's collectives). fsdp_pp and fsdp_tp_pp add the keys fsdp and
        fsdp_tp record (reshard_after_forward, fsdp_collective_time_s, collective_time_s; under
        TP tp, tp_collective_time_s, tp_collectives_per_step; see _measure_collectives).
        p2p_numel: elements of one activation send between stages (1/tp of it under TP)."""
        self.measure_bubble()
        busy = sum(b for b, _ in self._steps)
        wall = sum(w for _, w in self._steps)
        p, v, m = self.pp, self.v, self.m
        out: dict[str, Any] = {
            "bubble_theory": pipeline_bubble(p, m, v),
            "bubble_measured": max(0.0, 1.0 - busy / wall) if wall > 0 else None,
            "schedule": self.schedule_name,
            "stages_per_rank": v,
            "p2p_numel": self._activation_numel,
        }
        if self.fsdp:
            fsdp_s, tp_s, count = self._collectives or (0.0, 0.0, 0)
            out |= {
                "reshard_after_forward": bool(self.cfg.parallel.reshard_after_forward),
                "fsdp_collective_time_s": fsdp_s,
                "collective_time_s": fsdp_s + tp_s,
            }
            if self.tensor_parallel:
                out |= {"tp": self.topo.tp, "tp_collective_time_s": tp_s, "tp_collectives_per_step": count}
        return out


ENGINE = PipelineEngine
"""The engine the layouts whose row names this module run (launcher/layouts.py)."""
