"""Pipeline parallel for a `_target_` model by the recipe's own split (layouts pipeline and
dp_pp, parallel.pp_split: the module names where a stage begins). torch's pipelining tracer
(torch.export, on the meta device: nothing allocated) cuts the model's forward before each named
module; each stage keeps the original parameter names (`blocks.2.fc1.weight`), so it is
materialised alone from (seed, name) as the whole model would be. Stage modules are traced
graphs (their submodules torch's InterpreterModules, not nn.Linear…), so each tensor's initial
value comes by name from the module that owns it in the model as built (_initial_values).

What flows: the batch's inputs reach the stages that read them, each by its placeholder's name
(a model input read in the last stage, a `labels` say, goes there directly); activations go only
from one stage to the next (a tensor that skips a stage is refused at plan time, trace_stages);
model.target reaches the last stage's loss, or the last stage's output is the model's own loss.

The schedule steps, gradient semantics (scale_grads=False, loss ÷ (m × accum), dp sync only on
the last schedule step), bubble measurement, metrics and full state dict are PipelineEngine's
(engines/pipeline.py), which this subclasses; only the stages and the dict batch differ.
Schedules gpipe and 1f1b; no FSDP or TP inside a stage, no virtual stages (config/validate_layout.py);
like every pipeline layout, no checkpoints and no train.compile (their rows in launcher/layouts.py).
"""

from __future__ import annotations

import operator
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import torch
from torch import fx, nn
from torch.distributed.pipelining import Schedule1F1B, ScheduleGPipe, SplitPoint, pipeline
from torch.nn.parallel import DistributedDataParallel as DDP

from launcher import torch_compat
from launcher.compute.flop_count import random_tensor
from launcher.config.schema import LauncherConfig, ModelConfig
from launcher.config.validate_byo import TARGET_KEY
from launcher.layouts import DataParallel, traits
from launcher.train.engines.base import Topology, autocast
from launcher.train.engines.fsdp import local_numel
from launcher.train.engines.pipeline import PipelineEngine, _RunState, _Stage
from launcher.train.models import initial_value, materialise, param_seed, reference_values
from launcher.train.models.byo import checkpoint_modules, loss_fn, own_loss, to_device, unit_modules

SCHEDULES = {"gpipe": ScheduleGPipe, "1f1b": Schedule1F1B}


@dataclass(kw_only=True, frozen=True)
class TracedStage:
    module: fx.GraphModule
    """The stage: a traced graph whose parameters keep the model's names; positional inputs are
    the previous stage's outputs in order, keyword inputs the batch's (`inputs`)."""
    inputs: dict[str, str]
    """Keyword the stage takes → the model.inputs name it is fed from."""
    outputs: int
    """Tensors the stage returns (sent to the next stage; the last stage's: its output, 1)."""


@dataclass(kw_only=True, frozen=True)
class Traced:
    stages: list[TracedStage]
    """One per pipeline rank, in order."""
    p2p_numel: int
    """Elements of the largest send between neighbouring stages, per pipeline microbatch."""


def trace_stages(model: nn.Module, m: ModelConfig, split: Sequence[str], micro: int) -> Traced:
    """The model (on the meta device) cut before each module in `split`, traced with a meta
    microbatch of `micro` samples per input (torch.export specialises shapes: `micro` is the
    pipeline microbatch the schedule runs). ValueError when the cut is not len(split) + 1 stages
    passing activations between neighbours, or the last stage returns more than one tensor;
    torch.export's own errors as they come."""
    batch = {name: random_tensor(spec, (micro,), device="meta") for name, spec in m.inputs.items()}
    with warnings.catch_warnings():
        # torch's tracer trips its own pytree deprecation (LeafSpec) on every call: noise on the
        # user's terminal about torch, not about their model or config.
        warnings.filterwarnings("ignore", message=r".*LeafSpec.*", category=FutureWarning)
        pipe = pipeline(model, mb_args=(), mb_kwargs=batch, split_spec={name: SplitPoint.BEGINNING for name in split})
    if pipe.num_stages != len(split) + 1:
        raise ValueError(
            f"parallel.pp_split={list(split)} cut the traced forward into {pipe.num_stages} stages, not "
            f"{len(split) + 1}: each boundary module must run once per forward"
        )
    nodes = [n for n in pipe.split_gm.graph.nodes if n.op == "call_module"]
    output = next(n for n in pipe.split_gm.graph.nodes if n.op == "output")
    if {_source(a) for a in output.all_input_nodes} != {nodes[-1]}:
        raise ValueError("the model's output is not all computed in its last pipeline stage; return it from there")
    stages = [_stage(pipe.get_stage_module(s), nodes, s) for s in range(len(nodes))]
    if stages[-1].outputs != 1:
        raise ValueError(
            f"the last pipeline stage returns {stages[-1].outputs} tensors (the model's output, flattened); "
            "return one tensor, the output or the loss, for a pipeline layout"
        )
    sends = [
        sum(v.meta["val"].numel() for v in _returned(stage.module) if isinstance(v.meta.get("val"), torch.Tensor))
        for stage in stages[:-1]
    ]
    return Traced(stages=stages, p2p_numel=max(sends, default=0))


def _stage(module: fx.GraphModule, nodes: list[fx.Node], s: int) -> TracedStage:
    """Stage `s` with its placeholders reordered: the previous stage's outputs first, in the order
    it returns them (how PipelineStage hands them over), then the batch's inputs by keyword."""
    # torch gives the first stage the model's own pytree signature; plain keywords by
    # placeholder name are the same for every stage.
    module.graph.set_codegen(fx.CodeGen())
    placeholders = [n for n in module.graph.nodes if n.op == "placeholder"]
    inputs: dict[str, str] = {}
    received: list[tuple[int, fx.Node]] = []
    for ph, arg in zip(placeholders, nodes[s].args, strict=True):
        if arg.op == "placeholder":
            inputs[str(ph.target)] = str(arg.target)
            continue
        if _source(arg) is not nodes[s - 1]:
            raise ValueError(
                f"pipeline stage {s} reads {ph.name} from stage {nodes.index(_source(arg))}, not from the stage "
                "before it; move a boundary so no tensor skips a stage"
            )
        received.append((arg.args[1] if arg.target is operator.getitem else 0, ph))
    first = next(n for n in module.graph.nodes if n.op != "placeholder")
    for ph in [ph for _, ph in sorted(received, key=lambda r: r[0])] + [
        ph for ph in placeholders if str(ph.target) in inputs
    ]:
        first.prepend(ph)
    module.recompile()
    return TracedStage(module=module, inputs=inputs, outputs=len(_returned(module)))


def _source(arg: fx.Node) -> fx.Node:
    """The stage node a value of the split graph comes from (through getitem)."""
    return arg.args[0] if arg.target is operator.getitem else arg  # type: ignore[return-value]


def _returned(module: fx.GraphModule) -> list[fx.Node]:
    out = next(n for n in module.graph.nodes if n.op == "output").args[0]
    return list(out) if isinstance(out, (tuple, list)) else [out]


def _run_on(module: nn.Module, device: torch.device) -> None:
    """The stage's traced graphs made to run on `device` as generated code: the trace burnt its
    meta device into factory ops (torch.arange(n, device=x.device)), and torch's InterpreterModules
    would otherwise run node by node through fx.Interpreter, Python per op."""
    for mod in module.modules():
        graph = getattr(mod, "graph", None)
        if not isinstance(graph, fx.Graph):
            continue
        for node in graph.nodes:
            where = node.kwargs.get("device") if node.op == "call_function" else None
            if isinstance(where, (str, torch.device)) and torch.device(where).type == "meta":
                node.update_kwarg("device", device)
        for gm in (mod, mod.__dict__.get("graph_module")):  # an InterpreterModule's code lives in its graph_module
            if isinstance(gm, fx.GraphModule):
                gm.recompile()
        if hasattr(mod, "_run_with_interpreter"):
            mod._run_with_interpreter = False


def _counterparts(model: nn.Module, stage: nn.Module, modules: list[nn.Module]) -> list[nn.Module]:
    """The stage's traced modules under the names `modules` have in the model (those in it)."""
    mine = dict(stage.named_modules())
    names = {id(mod): name for name, mod in model.named_modules()}
    return [mine[names[id(mod)]] for mod in modules if names[id(mod)] in mine]


def _initial_values(model: nn.Module, cfg: LauncherConfig) -> Callable[[str], torch.Tensor]:
    """materialise's fallback for a stage: its owners are InterpreterModules, which have no rule;
    the value by name from the owner in the model as built (init.initial_value), else from the
    reference build (byo.ReferenceValues) — as a 1-rank ddp run initialises the same tensor."""
    reference = reference_values(cfg.model, cfg.seed)

    def value(name: str) -> torch.Tensor:
        prefix, _, leaf = name.rpartition(".")
        owner = model.get_submodule(prefix)
        try:
            shape = tuple(getattr(owner, leaf).shape)
            return initial_value(owner, leaf, shape, torch.device("cpu"), param_seed(cfg.seed, name))
        except TypeError:
            return reference(name)  # type: ignore[misc]

    return value


class ByoPipelineEngine(PipelineEngine):
    def __init__(self, model: nn.Module, topo: Topology, cfg: LauncherConfig, device: torch.device) -> None:
        # PipelineEngine.__init__ builds TokenModel stages; what its inherited methods read is set here.
        par = cfg.parallel
        self.cfg, self.device, self.topo = cfg, device, topo
        self.layout, self.schedule_name = par.layout, par.schedule
        self.pp, self.m, self.v, self.n_stages = topo.pp, par.microbatches, 1, topo.pp
        self.tensor_parallel = self.fsdp = False
        self.data_parallel = traits(par.layout).data_parallel  # none: pipeline; ddp: dp_pp
        self.pp_group, self.dp_group = topo.mesh["pp"].get_group(), topo.mesh["dp"].get_group()
        traced = trace_stages(model, cfg.model, par.pp_split, cfg.batch.micro // self.m)
        stage = traced.stages[topo.pp_rank]
        self.inputs = stage.inputs
        self.has_first, self.has_last = topo.pp_rank == 0, topo.pp_rank == topo.pp - 1
        module = stage.module
        _run_on(module, device)
        if cfg.model.activation_checkpointing == "full":
            checkpoint_modules(_counterparts(model, module, unit_modules(model, par)))
        materialise(module, device, seed=cfg.seed, fallback=_initial_values(model, cfg))
        self._autocast_forward(module)
        self.modules = [module]
        self._stage_numel = sum(local_numel(p) for p in module.parameters())
        self._activation_numel = traced.p2p_numel
        ids = [device.index] if device.type == "cuda" else None
        replicas = self.data_parallel == DataParallel.ddp
        self.wrapped = [DDP(module, device_ids=ids, process_group=self.dp_group) if replicas else module]
        self.foreach_optimizer = True
        self.loss = loss_fn(cfg.model)
        self._state = _RunState(device)
        pipe_stage = _Stage(self.wrapped[0], topo.pp_rank, self.pp, device, group=self.pp_group, state=self._state)
        if par.schedule not in SCHEDULES:
            raise ValueError(
                f"parallel.schedule={par.schedule} is not one of {', '.join(SCHEDULES)} for a `_target_` model"
            )
        self.schedule = SCHEDULES[par.schedule](
            pipe_stage, n_microbatches=self.m, loss_fn=self._loss, scale_grads=False
        )
        self._accum = 1
        self._last_batches: list[Any] = []
        self._steps: list[tuple[float, float]] = []
        self._collectives = None

    def _autocast_forward(self, module: nn.Module) -> None:
        """Autocast inside the stage's forward, where torch's shape inference (which calls the
        module directly) sees it too, as StageModule does."""
        if self.cfg.precision == "fp32":
            return
        inner = module.forward

        def forward(*args, **kwargs):
            with autocast(self.cfg, self.device):
                return inner(*args, **kwargs)

        module.forward = forward

    def _loss(self, output: Any, target: torch.Tensor) -> torch.Tensor:
        # Scaled so that summing over m microbatches × accum schedule steps gives the mean.
        with self._state.busy():
            loss = own_loss(output) if self.loss is None else self.loss(output, target)
        return loss / (self.m * self._accum)

    def _schedule_steps(self, micro_batches):
        accum = len(micro_batches)
        self._accum = accum
        total = torch.zeros((), device=self.device)
        for k, batch in enumerate(micro_batches):
            batch = to_device(batch, self.device)
            self._state.sync_grads = k == accum - 1
            losses: list[torch.Tensor] = []
            kwargs: dict[str, Any] = {key: batch[name] for key, name in self.inputs.items()}
            if self.has_last:
                # The schedule indexes a target per microbatch even for a model's own loss.
                samples = len(batch[next(iter(self.cfg.model.inputs))])
                kwargs |= {"target": batch.get(TARGET_KEY, torch.zeros(samples, device=self.device)), "losses": losses}
            self.schedule.step(**kwargs, **torch_compat.schedule_step_options())
            if self.has_last:
                total += torch.stack([loss.detach() for loss in losses]).sum()
        self._state.sync_grads = True
        return total if self.has_last else None

    def metrics(self) -> dict[str, Any]:
        """PipelineEngine's (bubble theory and measured, schedule, p2p_numel: the largest send
        between stages), and the split."""
        return super().metrics() | {"pp_split": list(self.cfg.parallel.pp_split)}


ENGINE = ByoPipelineEngine
"""The engine the layouts whose row names this module run (launcher/layouts.py)."""
