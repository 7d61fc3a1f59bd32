"""What `launcher plan --search` tries at one GPU count: every configuration the layout traits
table (launcher/layouts.py) allows, as small frozen `Candidate`s that turn back into config
overrides (for a later run of the chosen ones). Pure; no torch.

The space, per size N:
- every layout row; its set degrees from tp ∈ divisors of the GPUs per node (cluster.
  gpus_per_node, else DEFAULT_GPUS_PER_NODE) and whole nodes up to the NVLink domain
  (cluster.nvlink_domain: tp 8, 12, …, 72 on GB200 NVL72's 72 GPUs in nodes of 4; tensor parallel
  stays on NVLink, where comm.py prices it) and pp ∈ divisors of model.n_layers up to PP_BOUND,
  both ≥ 2 where the row sets them (degree 1 is another row); a row whose dimension follows the
  world size takes N (tp: N within the NVLink domain);
- virtual stages: every divisor v of the layers per stage (model.n_layers ÷ pp) for rows that
  interleave, v > 1 running interleaved_1f1b (Megatron's runs use 8 or 12 layers a rank in 2 to 6
  chunks; the bubble shrinks as 1/v, the stage sends grow as v: step.py prices both);
- micro-batch size MICRO_BATCHES (and the recipe's). Per data-parallel rank a step holds S
  samples: batch.global_batch ÷ dp when the recipe fixes the global batch, else the recipe's
  batch.micro × batch.accum. A pipeline runs all S / micro-batch of them as its micro-batches
  in one schedule (Megatron's way: the bubble is smallest); without a pipeline they are the
  accumulation steps;
- context parallel cp ∈ CP_DEGREES dividing model.seq_len where the row sets it (its ranks
  beside tp inside the NVLink domain: cp × tp ≤ its GPUs); hsdp with the recipe's parallel.shard
  (0: a node's GPUs), only where it makes a replicate × shard mesh (1 < shard < dp: otherwise
  it is fsdp, or a DDP that shards nothing, which their own rows already try);
- activation checkpointing none / selective / op / full (selective and torchtitan's per-op `op`
  only where the model has attention): `op` always, as torchtitan's default; for a recipe of the
  built-in trainer, which has no per-op policy (config/builtin_support.py), plan_search.py says
  so beside a recommendation that needs it and verifies only what that trainer runs;
  reshard after forward true / false for fsdp rows.
Each is checked by the sweep's own rules (trials.spec.make_trial): what a sweep would refuse is
never a candidate.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from dataclasses import dataclass

from launcher.config.builtin_support import builtin_lacks
from launcher.config.derived import derives_microbatches, nvlink_domain, ranks_per_node
from launcher.config.errors import ConfigError
from launcher.config.schema import LauncherConfig, ModelConfig
from launcher.layouts import LAYOUTS, DataParallel, Degree, LayoutTraits
from launcher.trials.cp_hsdp import hsdp_shard

DEFAULT_GPUS_PER_NODE = 8
"""GPUs per node when cluster.gpus_per_node does not say (0): an HGX/DGX-class node."""
PP_BOUND = 32
"""Largest pipeline degree tried (beyond it the bubble and the sends dominate any model here)."""
MICRO_BATCHES = (1, 2, 4, 8)
"""Micro-batch sizes tried, beside the recipe's own."""
CHECKPOINTING = ("none", "selective", "op", "full")
EXPERT_DEGREES = (2, 4, 8, 16, 32, 64)
"""parallel.ep values a search tries where the layout splits experts: those dividing dp and n_experts."""
CP_DEGREES = (2, 4, 8)
"""Context-parallel degrees tried where a row sets cp (Llama 3 405B trained its long-context phase at cp 16)."""


@dataclass(kw_only=True, frozen=True)
class Candidate:
    """One configuration at one size."""

    world_size: int
    """GPUs: dp × cp × tp × pp."""
    layout: str
    """A row of launcher/layouts.py."""
    dp: int
    """Data-parallel degree."""
    tp: int
    """Tensor-parallel degree."""
    pp: int
    """Pipeline degree."""
    ep: int = 1
    """Expert-parallel degree (fsdp_ep; borrowed from dp, so not a factor of world_size)."""
    cp: int = 1
    """Context-parallel degree (world size = dp × cp × tp × pp)."""
    virtual_stages: int
    """Stages per pipeline rank (1: plain 1F1B; > 1: interleaved_1f1b)."""
    micro_batch: int
    """Samples in one micro-batch (one pipeline micro-batch under pp, one accumulation step without)."""
    microbatches: int
    """Pipeline micro-batches per optimizer step (1 without a pipeline)."""
    accum: int
    """Accumulation steps per optimizer step (1 under a pipeline: its micro-batches are the steps)."""
    checkpointing: str
    """model.activation_checkpointing: none, selective, op or full."""
    reshard_after_forward: bool | None
    """FSDP rows: free gathered parameters after forward; None where no FSDP runs."""
    sync_each_microstep: bool | None = None
    """FSDP without a pipeline, accumulating: reduce-scatter after every micro-step
    (parallel.fsdp_sync_each_microstep); None where it does not apply."""
    derived: bool = False
    """The recipe fixes batch.global_batch and this row pipelines: batch.micro is the micro-batch size
    and the micro-batches are derived from it (config/derived.py pipeline_batch), not overridden."""

    @property
    def global_batch(self) -> int:
        return self.micro_batch * self.microbatches * self.accum * self.dp

    @property
    def pipelined(self) -> bool:
        return LAYOUTS[self.layout].splits("pp")

    def overrides(self) -> list[str]:
        """The config overrides that run this candidate (on top of its recipe): the layout and its
        set degrees, the schedule, the batch split, checkpointing, resharding."""
        row = LAYOUTS[self.layout]
        out = [f"parallel={self.layout}"]
        out += [f"parallel.{d}={getattr(self, d)}" for d in row.set_dims]
        if self.pipelined:
            schedule = "interleaved_1f1b" if self.virtual_stages > 1 else "1f1b"
            out.append(f"parallel.schedule={schedule}")
            out += [] if self.derived else [f"parallel.microbatches={self.microbatches}"]
            if self.virtual_stages > 1:
                out.append(f"parallel.virtual_stages={self.virtual_stages}")
        out += [f"batch.micro={self._batch_micro}", f"batch.accum={self.accum}"]
        out.append(f"model.activation_checkpointing={self.checkpointing}")
        if self.reshard_after_forward is not None:
            out.append(f"parallel.reshard_after_forward={str(self.reshard_after_forward).lower()}")
        if self.sync_each_microstep is not None:
            out.append(f"parallel.fsdp_sync_each_microstep={str(self.sync_each_microstep).lower()}")
        return out

    def config(self, cfg: LauncherConfig) -> LauncherConfig:
        """`cfg` with this candidate's overrides applied (what composing `overrides()` gives, without
        Hydra: the search builds thousands)."""
        row, par = LAYOUTS[self.layout], cfg.parallel
        parallel = dataclasses.replace(
            par,
            layout=self.layout,
            tp=self.tp if row.tp == Degree.set else par.tp,
            pp=self.pp if row.pp == Degree.set else par.pp,
            ep=self.ep if row.ep == Degree.set else par.ep,
            cp=self.cp if row.cp == Degree.set else par.cp,
            schedule=("interleaved_1f1b" if self.virtual_stages > 1 else "1f1b") if self.pipelined else par.schedule,
            microbatches=self.microbatches if self.pipelined and not self.derived else par.microbatches,
            virtual_stages=self.virtual_stages if self.virtual_stages > 1 else par.virtual_stages,
            reshard_after_forward=par.reshard_after_forward
            if self.reshard_after_forward is None
            else self.reshard_after_forward,
            fsdp_sync_each_microstep=par.fsdp_sync_each_microstep
            if self.sync_each_microstep is None
            else self.sync_each_microstep,
        )
        batch = dataclasses.replace(cfg.batch, micro=self._batch_micro, accum=self.accum)
        model = dataclasses.replace(cfg.model, activation_checkpointing=self.checkpointing)
        return dataclasses.replace(cfg, parallel=parallel, batch=batch, model=model)

    @property
    def _batch_micro(self) -> int:
        """batch.micro: the micro-batch size where the micro-batches are derived, else the rank's
        micro-step (split into parallel.microbatches under a pipeline)."""
        return self.micro_batch if self.derived else self.micro_batch * self.microbatches

    @property
    def label(self) -> str:
        """Short: `fsdp_tp_pp tp8 pp4 v2 mb1×64 sel keep` (keep: no resharding after forward)."""
        parts = [self.layout]
        parts += [f"{d}{getattr(self, d)}" for d in ("tp", "pp", "cp", "ep") if LAYOUTS[self.layout].splits(d)]
        if self.virtual_stages > 1:
            parts.append(f"v{self.virtual_stages}")
        steps = self.microbatches if self.pipelined else self.accum
        parts.append(f"mb{self.micro_batch}×{steps}")
        parts.append({"none": "no-ckpt", "selective": "sel", "op": "op", "full": "full"}[self.checkpointing])
        if self.reshard_after_forward is not None:
            parts.append("reshard" if self.reshard_after_forward else "keep")
        if self.sync_each_microstep:
            parts.append("sync-each")
        return " ".join(parts)


def gpus_per_node(cfg: LauncherConfig) -> int:
    """GPUs on one node: the cluster's ranks per node where it says GPUs, else the default."""
    return ranks_per_node(cfg.cluster) if cfg.cluster.gpus_per_node else DEFAULT_GPUS_PER_NODE


def tensor_degrees(cfg: LauncherConfig) -> list[int]:
    """tp degrees a search tries: the divisors of a node's GPUs, then whole nodes up to the NVLink
    domain (cluster.nvlink_domain, a multiple of them: checked by config/derived.nvlink_domain). A
    group of whole nodes inside one domain runs on NVLink (comm.Topology.on_nvlink); a node's GPUs
    alone never span more."""
    gpn = gpus_per_node(cfg)
    domain = nvlink_domain(cfg.cluster) if cfg.cluster.nvlink_domain else gpn
    return sorted({*_divisors(gpn, gpn), *range(gpn, domain + 1, gpn)})


def virtual_choices(n_layers: int, pp: int) -> list[int]:
    """Stages per pipeline rank tried at `pp`: every divisor of the layers per stage ([1] where pp
    does not split the layers evenly: a sweep refuses that pipeline anyway)."""
    return _divisors(n_layers // pp, n_layers) if n_layers % pp == 0 else [1]


def _divisors(n: int, bound: int) -> list[int]:
    return [d for d in range(1, min(n, bound) + 1) if n % d == 0]


def recipe_micro_batch(cfg: LauncherConfig) -> int:
    """The recipe's own micro-batch size: batch.micro, split into parallel.microbatches under a
    pipeline unless a fixed global batch derives the micro-batches (derives_microbatches)."""
    if traits_pipelined(cfg.parallel.layout) and not derives_microbatches(cfg):
        return max(1, cfg.batch.micro // cfg.parallel.microbatches)
    return cfg.batch.micro


def traits_pipelined(layout: str) -> bool:
    return LAYOUTS[layout].splits("pp")


def degrees(
    row: LayoutTraits,
    n: int,
    tps: list[int],
    pps: list[int],
    cps: tuple[int, ...] | list[int] = (1,),
    recipe: tuple[int, int] = (1, 1),
) -> Iterator[tuple[int, int, int, int]]:
    """(dp, tp, pp, cp) of `row` at `n` GPUs, each set degree ≥ 2 from `tps` / `pps` / `cps`; cp × tp
    stay inside the NVLink domain (both ≤ max(tps), its GPUs), but for the recipe's own (tp, cp), which
    is always tried: published long-sequence runs ring cp across nodes (torchtitan's tp 8 × cp 8)."""
    if row.data_parallel == DataParallel.none:
        if row.tp == Degree.world and n in tps:
            yield 1, n, 1, 1
        elif row.pp == Degree.world and n in pps:
            yield 1, 1, n, 1
        return
    for tp in [t for t in tps if t > 1] if row.tp == Degree.set else [1]:
        for pp in [p for p in pps if p > 1] if row.pp == Degree.set else [1]:
            for cp in [c for c in cps if c * tp <= max(tps) or (tp, c) == recipe]:
                if n % (tp * pp * cp) == 0:
                    yield n // (tp * pp * cp), tp, pp, cp


def context_degrees(row: LayoutTraits, cfg: LauncherConfig) -> list[int]:
    """The cp degrees tried for `row`: CP_DEGREES (and the recipe's) dividing model.seq_len; [1] where
    the row does not split the sequence."""
    if row.cp != Degree.set:
        return [1]
    tried = {*CP_DEGREES, *([cfg.parallel.cp] if cfg.parallel.cp else [])}
    return sorted(c for c in tried if c > 1 and cfg.model.seq_len % c == 0)


def expert_degrees(row: LayoutTraits, m: ModelConfig, dp: int) -> list[int]:
    """parallel.ep values of `row` for model `m` at `dp`: [1] where it splits no experts; none for a
    dense model under a row that does, or a MoE model under a row that cannot run one (tp, pipelines)."""
    if not row.splits("ep"):
        return [1] if not m.n_experts or row.whole_model else []
    return [e for e in EXPERT_DEGREES if m.n_experts and dp % e == 0 and m.n_experts % e == 0]


def distinct_mesh(row: LayoutTraits, cfg: LauncherConfig, dp: int) -> bool:
    """Whether `row` at `dp` is a layout of its own: hsdp only with 1 < shard < dp (a sweep refuses a
    shard not dividing dp); every other row always."""
    if row.replicate == Degree.none:
        return True
    try:
        return 1 < hsdp_shard(cfg, dp) < dp
    except ConfigError:
        return False


def samples_per_rank(cfg: LauncherConfig, dp: int) -> int | None:
    """S: samples one data-parallel rank takes per optimizer step (None: the global batch does not split)."""
    g = cfg.batch.global_batch
    if g is None:
        return cfg.batch.micro * cfg.batch.accum
    return g // dp if g % dp == 0 else None


def checkpointing_choices(cfg: LauncherConfig) -> list[str]:
    """model.activation_checkpointing values the search tries: none, full, and where the model has
    attention selective and op (the mlp model has no attention core to rerun, and op keeps there
    what none keeps)."""
    return [c for c in CHECKPOINTING if cfg.model.arch != "mlp" or c in ("none", "full")]


def builtin_runs(cfg: LauncherConfig, cand: Candidate) -> bool:
    """Whether the trainer `cfg` describes runs `cand`: every candidate for another trainer's recipe;
    for the built-in trainer's, those asking nothing it lacks (op: config/builtin_support.py)."""
    return bool(builtin_lacks(cfg)) or not builtin_lacks(cand.config(cfg))


def candidates(cfg: LauncherConfig, n: int) -> Iterator[Candidate]:
    """Every candidate at `n` GPUs, before the sweep's checks and the memory limit (search.py
    applies both); smaller micro-batches first within each layout and degrees."""
    m = cfg.model
    tps = tensor_degrees(cfg)
    pps = sorted({*_divisors(m.n_layers, PP_BOUND), *([cfg.parallel.pp] if cfg.parallel.pp else [])})
    micros = sorted({*MICRO_BATCHES, recipe_micro_batch(cfg)})
    ckpts = checkpointing_choices(cfg)
    for name, row in LAYOUTS.items():
        if cfg.train.compile and not row.compile:
            continue
        reshards = [True, False] if row.data_parallel == DataParallel.fsdp else [None]
        recipe = (cfg.parallel.tp or 1, cfg.parallel.cp or 1)
        for dp, tp, pp, cp in degrees(row, n, tps, pps, cps=context_degrees(row, cfg), recipe=recipe):
            s = samples_per_rank(cfg, dp)
            if s is None or not distinct_mesh(row, cfg, dp):
                continue
            for ep, v in (
                (e, v)
                for e in expert_degrees(row, m, dp)
                for v in (virtual_choices(m.n_layers, pp) if row.virtual_stages and pp > 1 else [1])
            ):
                for ckpt in ckpts:
                    for reshard in reshards:
                        for mb in (x for x in micros if s % x == 0):
                            steps = s // mb
                            # Syncing every micro-step is a choice only where FSDP accumulates.
                            accumulates = reshard is not None and not row.splits("pp") and steps > 1
                            for sync in [False, True] if accumulates else [None]:
                                yield Candidate(
                                    world_size=n,
                                    layout=name,
                                    dp=dp,
                                    tp=tp,
                                    pp=pp,
                                    ep=ep,
                                    cp=cp,
                                    virtual_stages=v,
                                    micro_batch=mb,
                                    microbatches=steps if row.splits("pp") else 1,
                                    accum=1 if row.splits("pp") else steps,
                                    checkpointing=ckpt,
                                    reshard_after_forward=reshard,
                                    sync_each_microstep=sync,
                                    derived=row.splits("pp") and cfg.batch.global_batch is not None,
                                )
