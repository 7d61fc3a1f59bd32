"""A measured site profile (`launcher profile` writes it; `launcher plan cluster.profile=PATH` reads it):
the matmul rate over shapes and dtypes, the memory bandwidth, and each collective's bus bandwidth and
latency within a node and across nodes (the file's schema: launcher/train/profile_plan.py, docs/profile.md).

What the plan takes from it (plan_table.preset_model): the step's compute at `matmul_rate` at the
model's own matmul shapes, in place of peak × an assumed MFU, and its links from the measured
all-reduce (`links`) in place of the cluster's nominal presets. Pure apart from `load`'s one read.
"""

from __future__ import annotations

import bisect
import dataclasses
import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from launcher.compute.flops import executed_flops_per_token
from launcher.compute.loss_bytes import loss_kind
from launcher.compute.shape_rate import Curve, Measured, step_parts
from launcher.config.errors import ConfigError
from launcher.config.schema import LauncherConfig, ModelConfig
from launcher.layouts import DataParallel, traits
from launcher.perf.compute_term import tokens_per_optimizer_step
from launcher.perf.links import LINKS, Link, ring_latency_s
from launcher.train.profile_plan import OPS, READABLE_VERSIONS, SCHEMA, SCOPES

REFERENCE_BYTES = 25 * 2**20
"""The message size a link's bandwidth is read at: a DDP bucket (bucket_cap_mb=25), the order of an
FSDP layer's gather too; the profile's largest size where it measured none this large (a CPU bed's 4 MiB)."""


class ProfileError(ConfigError):
    """A profile that cannot be read or lacks what the plan asks of it: the CLI's one line, exit 2."""


@dataclass(kw_only=True, frozen=True)
class Point:
    bytes: int
    """nccl-tests' size of one operation."""
    busbw_gbs: float
    """Bus bandwidth, GB/s (nccl-tests' busbw)."""
    latency_us: float
    """Median time of one operation of this size, µs."""


@dataclass(kw_only=True, frozen=True)
class SiteProfile:
    path: str
    """The file read."""
    device_name: str
    """The device measured (torch's name for a GPU; `cpu`)."""
    matmul: Mapping[str, tuple[tuple[int, int, int, float], ...]]
    """dtype → (m, n, k, TFLOP/s) per shape measured."""
    mem_bw_gbs: float
    """GB/s of a large copy (bytes read + written ÷ time)."""
    collectives: Mapping[tuple[str, str], tuple[Point, ...]]
    """(op, scope) → its points, smallest message first."""
    scope_ranks: Mapping[str, int]
    """Scope → the ranks its collectives ran over."""
    device_type: str = "cpu"
    """`cpu` or `cuda`: whether the host's dispatch adds to the compute (CPU) or runs ahead of it."""
    op_us: float | None = None
    """µs the host spends per dispatched op beyond its arithmetic (schema 2; None in a schema 1 file)."""
    attention: Mapping[str, tuple[tuple[int, int, float], ...]] = dataclasses.field(default_factory=dict)
    """dtype → (sequence, head dim, counted TFLOP/s) of the causal attention kernel (schema 2)."""
    overlap: Mapping[str, float] = dataclasses.field(default_factory=dict)
    """Scope → the share of an all-reduce's time that the ranks computing at once hide, in [−1, 1] (schema 3;
    none before: the overlap model's 1)."""

    def matmul_points(self, dtype: str) -> list[tuple[int, int, int, float]]:
        """(m, n, k, TFLOP/s) of `dtype`'s matmuls; ProfileError when the profile holds none."""
        if dtype not in self.matmul:
            raise ProfileError(
                f"cluster.profile={self.path}: no {dtype} matmuls measured (it holds "
                f"{', '.join(self.matmul) or 'none'}); profile a device that runs {dtype}, or plan another precision"
            )
        return list(self.matmul[dtype])

    def busbw(self, op: str, scope: str, nbytes: float) -> float:
        """GB/s of `op` within `scope` at `nbytes`: linear in log(bytes) between the two nearest sizes
        measured, the end's figure beyond them."""
        return _interpolate(self._points(op, scope), nbytes, lambda p: p.busbw_gbs)

    def latency_us(self, op: str, scope: str, nbytes: float) -> float:
        return _interpolate(self._points(op, scope), nbytes, lambda p: p.latency_us)

    def has(self, op: str, scope: str) -> bool:
        return (op, scope) in self.collectives

    def _points(self, op: str, scope: str) -> tuple[Point, ...]:
        if (op, scope) not in self.collectives:
            raise ProfileError(f"cluster.profile={self.path}: no {op} measured {scope} (measured: {self._held()})")
        return self.collectives[(op, scope)]

    def _held(self) -> str:
        return ", ".join(f"{op} {scope}" for op, scope in self.collectives) or "no collective"


def _interpolate(points: Sequence[Point], nbytes: float, value) -> float:
    sizes = [p.bytes for p in points]
    i = bisect.bisect_left(sizes, nbytes)
    if i == 0:
        return value(points[0])
    if i == len(points):
        return value(points[-1])
    lo, hi = points[i - 1], points[i]
    w = (math.log(nbytes) - math.log(lo.bytes)) / (math.log(hi.bytes) - math.log(lo.bytes))
    return value(lo) + w * (value(hi) - value(lo))


def matmul_flops(profile: SiteProfile, dtype: str, m: int, n: int, k: int) -> float:
    """FLOP/s of one (m, n, k) matmul: linear in log(s) between the measured rates at the two nearest
    smallest dimensions s = min(m, n, k) (a matmul's rate follows s: compute/shape_rate.py), shapes of
    one s averaged; beyond the grid, its end's rate."""
    by_s: dict[int, list[float]] = {}
    for pm, pn, pk, tflops in profile.matmul_points(dtype):
        by_s.setdefault(min(pm, pn, pk), []).append(tflops * 1e12)
    levels = sorted((s, sum(r) / len(r)) for s, r in by_s.items())
    s = min(m, n, k)
    i = bisect.bisect_left([lv for lv, _ in levels], s)
    if i == 0 or i == len(levels):
        return levels[min(i, len(levels) - 1)][1]
    (s0, r0), (s1, r1) = levels[i - 1], levels[i]
    return r0 + (r1 - r0) * (math.log(s) - math.log(s0)) / (math.log(s1) - math.log(s0))


def attention_flops(profile: SiteProfile, dtype: str, seq: int, head_dim: int) -> float | None:
    """Counted FLOP/s of the causal attention kernel at (seq, head_dim): among the points of the measured
    head dim nearest in log, linear in log(seq) between the two nearest sequences (the end's beyond them);
    None where the profile measured no attention in `dtype`."""
    points = profile.attention.get(dtype)
    if not points:
        return None
    near = min({q for _, q, _ in points}, key=lambda q: (abs(math.log(q / head_dim)), q))
    line = sorted((t, r * 1e12) for t, q, r in points if q == near)
    i = bisect.bisect_left([t for t, _ in line], seq)
    if i == 0 or i == len(line):
        return line[min(i, len(line) - 1)][1]
    (t0, r0), (t1, r1) = line[i - 1], line[i]
    return r0 + (r1 - r0) * (math.log(seq) - math.log(t0)) / (math.log(t1) - math.log(t0))


@dataclass(kw_only=True, frozen=True)
class StepSeconds:
    """Seconds per token of one rank's step on the profiled device, by where they go."""

    matmul_s: float
    attention_s: float
    memory_s: float
    """Norms, activations, the loss and the optimizer step at the measured copy bandwidth."""
    dispatch_s: float
    """The host's fixed cost per op × the ops a step dispatches (0 where the profile has no op_us)."""
    overlapped: bool
    """A GPU's host dispatches ahead of its kernels: the step takes the longer of the two, not their sum."""

    @property
    def total_s(self) -> float:
        device = self.matmul_s + self.attention_s + self.memory_s
        return max(device, self.dispatch_s) if self.overlapped else device + self.dispatch_s


# Ops the built-in trainer dispatches (aten ops, views included, as a TorchDispatchMode counts them; torch
# 2.13 on CPU): per micro-batch's forward and backward a + b·layers by architecture, and per optimizer step
# (global-norm clipping, then single-tensor AdamW, then zero_grad) 16 + 9 per parameter tensor, of which an
# architecture has c + e·layers; DDP's reducer adds 16 + 4 per parameter tensor a step and 2 a micro-batch
# under no_sync. tests/unit/test_site_profile.py counts real steps against them.
_FWD_BWD_OPS = {"gpt": (40, 132), "llama": (54, 227), "mlp": (40, 40)}
_PARAM_TENSORS = {"gpt": (5, 16), "llama": (3, 9), "mlp": (5, 6)}
STEP_OPS, OPS_PER_PARAM = 16, 9
DDP_STEP_OPS, DDP_OPS_PER_PARAM, DDP_OPS_PER_NO_SYNC = 16, 4, 2


def dispatched_ops(model: ModelConfig, accum: int, *, ddp: bool = False) -> int:
    """Ops one rank's optimizer step dispatches: `accum` micro-batches' forward and backward, then the
    optimizer's, and DDP's where `ddp` (the rule above; a MoE model counted as its llama blocks: its
    routing adds more; FSDP's and tensor parallel's own ops are not counted)."""
    arch = model.arch if model.arch in _FWD_BWD_OPS else "llama"
    a, b = _FWD_BWD_OPS[arch]
    c, e = _PARAM_TENSORS[arch]
    tensors = c + e * model.n_layers
    ops = accum * (a + b * model.n_layers) + STEP_OPS + OPS_PER_PARAM * tensors
    if ddp:
        ops += DDP_STEP_OPS + DDP_OPS_PER_PARAM * tensors + DDP_OPS_PER_NO_SYNC * (accum - 1)
    return ops


def _step_ops(cfg: LauncherConfig) -> int:
    return dispatched_ops(cfg.model, cfg.batch.accum, ddp=traits(cfg.parallel.layout).data_parallel == DataParallel.ddp)


def measured(profile: SiteProfile) -> Measured:
    """The profile as compute/shape_rate.py's measured rates (its largest matmul rate standing for the peak)."""
    return Measured(
        matmul_flops=lambda m, n, k, dtype: matmul_flops(profile, dtype, m, n, k),
        peak_flops=lambda dtype: max(p[3] for p in profile.matmul_points(dtype)) * 1e12,
        mem_bw_gbs=profile.mem_bw_gbs,
        attention_flops=lambda seq, head_dim, dtype: attention_flops(profile, dtype, seq, head_dim),
    )


def step_seconds(cfg: LauncherConfig, profile: SiteProfile, dtype: str) -> StepSeconds:
    """The recipe's step on the profiled device, per token of one rank: the op model's operations
    (compute/flops.model_ops) with every matmul at its measured rate for its shape and dtype, the
    attention kernel at its share of the fastest measured matmul, the memory-bound ops (activations at
    the step's own width: fp32 moves twice bf16's bytes; the loss as cfg.trainer runs it, compute/loss_bytes.py)
    and the optimizer step at the measured copy bandwidth, and the profile's per-op cost for every op the
    step dispatches."""
    if cfg.model._target_ is not None:
        raise ProfileError(
            f"cluster.profile={profile.path}: a `_target_` model's operations are not known to the plan; "
            "drop cluster.profile, or measure the model with a sweep and plan --from it"
        )
    dtype = dtype if dtype in profile.matmul or dtype != "tf32" else "fp32"
    b, cp, tp = cfg.batch, cfg.parallel.cp or 1, cfg.parallel.tp or 1
    tokens = max(1, b.micro * cfg.model.seq_len // cp)
    t = step_parts(
        cfg.model,
        micro_batch=b.micro,
        device=None,
        dtype=dtype,
        tp=tp,
        cp=cp,
        optimizer=str(cfg.optim.name),
        weight_decay=cfg.optim.weight_decay > 0,
        tokens_per_step=tokens_per_optimizer_step(cfg),  # None: FSDP's state sharded over a size not known here
        compiled=cfg.train.compile,
        loss=loss_kind(cfg.trainer),
        measured=measured(profile),
    ).seconds(Curve(1.0, 0.0))
    ops_per_token = _step_ops(cfg) / (tokens * b.accum)
    return StepSeconds(
        matmul_s=t.matmul_s,
        attention_s=t.attention_s,
        memory_s=t.memory_s,
        dispatch_s=(profile.op_us or 0.0) * 1e-6 * ops_per_token,
        overlapped=profile.device_type == "cuda",
    )


def links(profile: SiteProfile | None, intra: Link, inter: Link) -> tuple[Link, Link]:
    """The plan's (in-node, between-node) links: the profile's all-reduce at REFERENCE_BYTES with α its
    smallest message's time over the ring's 2(n−1) hops, where it measured that scope; else the preset."""
    if profile is None:
        return intra, inter
    return _link(profile, "intra", intra), _link(profile, "inter", inter)


def _link(profile: SiteProfile, scope: str, preset: Link) -> Link:
    if not profile.has("all_reduce", scope):
        return preset
    points = profile.collectives[("all_reduce", scope)]
    n = profile.scope_ranks[scope]
    busbw = profile.busbw("all_reduce", scope, min(REFERENCE_BYTES, points[-1].bytes))
    return Link(
        name=f"profile {scope}",
        bandwidth_gbps=busbw,
        latency_s=ring_latency_s([(p.bytes, p.latency_us * 1e-6) for p in points], n, busbw),
        overlap=profile.overlap.get(scope, 1.0),
        source=f"measured all-reduce over {n} ranks, {profile.path}",
    )


def load(path: str | Path) -> SiteProfile:
    """The profile at `path`; ProfileError (one line: the file, what is wrong, how to fix) when it is
    missing, not JSON, of another schema or version, or holds a figure that is not a positive number."""
    where = f"cluster.profile={path}"
    try:
        doc = json.loads(Path(path).read_text())
    except FileNotFoundError:
        raise ProfileError(f"{where}: no such file; make one with `launcher profile --output {path}`") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise ProfileError(f"{where}: cannot be read ({exc.__class__.__name__}: {exc})") from None
    except json.JSONDecodeError as exc:
        raise ProfileError(f"{where}: not JSON ({exc}); make it again with `launcher profile`") from None
    if not isinstance(doc, dict) or doc.get("schema") != SCHEMA:
        raise ProfileError(f'{where}: not a site profile (no "schema": "{SCHEMA}"); make one with `launcher profile`')
    if doc.get("version") not in READABLE_VERSIONS:
        raise ProfileError(
            f"{where}: schema version {doc.get('version')!r}, this launcher reads "
            f"{', '.join(map(str, READABLE_VERSIONS))}; "
            "make it again with this launcher's `launcher profile`"
        )
    try:
        return _parse(str(path), doc)
    except (KeyError, TypeError, ValueError, AttributeError) as exc:
        said = str(exc) if isinstance(exc, ProfileError) else f"{exc.__class__.__name__}: {exc}"
        raise ProfileError(f"{where}: damaged ({said}); make it again with `launcher profile`") from None


def _positive(value, what: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not (math.isfinite(value) and value > 0):
        raise ProfileError(f"{what} is {value!r}, not a positive number")
    return float(value)


def _share(value, what: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not -1 <= value <= 1:
        raise ProfileError(f"{what} is {value!r}, not a share in [-1, 1]")
    return float(value)


def _parse(path: str, doc: dict) -> SiteProfile:
    matmul = {
        dtype: tuple(
            (
                int(_positive(p["m"], "m")),
                int(_positive(p["n"], "n")),
                int(_positive(p["k"], "k")),
                _positive(p["tflops"], f"{dtype} tflops"),
            )
            for p in points
        )
        for dtype, points in doc["matmul"].items()
    }
    collectives = {}
    for op, scopes in doc["collectives"].items():
        for scope, points in scopes.items():
            if op not in OPS or scope not in SCOPES:
                raise ProfileError(f"unknown collective {op!r} or scope {scope!r}")
            pts = sorted(
                (
                    Point(
                        bytes=int(_positive(p["bytes"], "bytes")),
                        busbw_gbs=_positive(p["busbw_gbs"], f"{op} {scope} busbw_gbs"),
                        latency_us=_positive(p["latency_us"], f"{op} {scope} latency_us"),
                    )
                    for p in points
                ),
                key=lambda p: p.bytes,
            )
            if pts:
                collectives[(op, scope)] = tuple(pts)
    ranks = {s: int(_positive(v["ranks"], f"{s} ranks")) for s, v in doc["scopes"].items()}
    # Schema 1 measured no per-op cost: read as none (the plan's footer says so), not guessed.
    op_us = _positive(doc["op_us"], "op_us") if doc["version"] >= 2 else None
    attention = {
        dtype: tuple(
            (
                int(_positive(p["seq"], "seq")),
                int(_positive(p["head_dim"], "head_dim")),
                _positive(p["tflops"], f"{dtype} attention tflops"),
            )
            for p in points
        )
        for dtype, points in (doc["attention"] if doc["version"] >= 2 else {}).items()
    }
    # Schema 3 measured the overlap; before it, the overlap model's own assumption (1) stands, as it did.
    overlap = {sc: _share(v, f"{sc} overlap") for sc, v in (doc.get("overlap") or {}).items() if doc["version"] >= 3}
    if missing := sorted({s for _, s in collectives} - set(ranks)):
        raise ProfileError(f"no rank count for scope {missing[0]!r}")
    return SiteProfile(
        path=path,
        device_name=str(doc["device"]["name"]),
        device_type=str(doc["device"].get("type", "cpu")),
        op_us=op_us,
        attention=attention,
        overlap=overlap,
        matmul=matmul,
        mem_bw_gbs=_positive(doc["mem_bw_gbs"], "mem_bw_gbs"),
        collectives=collectives,
        scope_ranks=ranks,
    )


def for_plan(cfg: LauncherConfig) -> SiteProfile | None:
    """cluster.profile read (ProfileError: one line), None where it is not set."""
    return load(cfg.cluster.profile) if cfg.cluster.profile else None


def compute_rate(cfg: LauncherConfig, profile: SiteProfile, dtype: str) -> float:
    """FLOP/s the step's compute runs at on the profiled device: the executed FLOPs per token over the
    seconds per token the recipe's operations take at the profile's measured rates (`step_seconds`)."""
    return executed_flops_per_token(cfg.model) / step_seconds(cfg, profile, dtype).total_s


def phrase(cfg: LauncherConfig, dtype: str) -> str:
    """What a plan on cluster.profile assumed, for its source line: where a micro-batch's time goes."""
    profile = load(str(cfg.cluster.profile))
    t = step_seconds(cfg, profile, dtype)
    tokens = cfg.batch.micro * cfg.model.seq_len // (cfg.parallel.cp or 1)
    ms = {k: getattr(t, k) * tokens * 1e3 for k in ("matmul_s", "attention_s", "memory_s", "dispatch_s")}
    ops = _step_ops(cfg)
    per_op = (
        f"{profile.op_us:.3g} µs per op × {ops} ops a step {ms['dispatch_s']:.3g} ms"
        + (" (under the device's kernels)" if t.overlapped else "")
        if profile.op_us
        else "no per-op cost (a schema 1 profile did not measure it)"
    )
    intra, inter = links(profile, LINKS[cfg.cluster.intra_link], LINKS[cfg.cluster.inter_link])
    return (
        f"{profile.device_name} measured ({profile.path}): the recipe's ops at its rates, per micro-batch "
        f"{dtype} matmuls {ms['matmul_s']:.3g} ms, attention {ms['attention_s']:.3g} ms, memory-bound at "
        f"{profile.mem_bw_gbs:.3g} GB/s {ms['memory_s']:.3g} ms, {per_op}; in-node {intra.bandwidth_gbps:.3g} GB/s "
        f"α {intra.latency_s * 1e6:.3g} µs ({intra.name or 'preset'}), "
        f"{inter.name or 'preset'} {inter.bandwidth_gbps:.3g} GB/s α {inter.latency_s * 1e6:.3g} µs"
    )
