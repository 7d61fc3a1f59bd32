"""A measured site profile (`launcher profile` writes it; `launcher plan cluster.profile=PATH` reads it):
the matmul rate over shapes and dtypes, the memory bandwidth, and each collective's bus bandwidth and
latency within a node and across nodes (the file's schema: launcher/train/profile_plan.py, docs/profile.md).

What the plan takes from it (plan_table.preset_model): the step's compute at `matmul_rate` at the
model's own matmul shapes, in place of peak × an assumed MFU, and its links from the measured
all-reduce (`links`) in place of the cluster's nominal presets. Pure apart from `load`'s one read.
"""

from __future__ import annotations

import bisect
import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from launcher.compute.flops import ffn_width, kv_heads
from launcher.config.derived import head_dim
from launcher.config.errors import ConfigError
from launcher.config.schema import LauncherConfig, ModelConfig
from launcher.perf.links import LINKS, Link
from launcher.train.profile_plan import OPS, SCHEMA, SCHEMA_VERSION, SCOPES

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


def matmul_rate(profile: SiteProfile, dtype: str, shapes: Sequence[tuple[int, int, int]]) -> float:
    """FLOP/s of `shapes`' matmuls together (each counted once, weighted by its FLOPs, so the time
    adds up): each at the measured point nearest in log(m), log(n), log(k) (of two as near, the smaller:
    the rate a matmul is sure to reach, as rates rise with size). The one place a profile
    prices compute; launcher/compute/shape_rate.py takes it over once it reads profiles."""
    points = profile.matmul_points(dtype)
    if not shapes:
        raise ValueError("matmul_rate needs at least one (m, n, k)")
    seconds = flops = 0.0
    for m, n, k in shapes:
        near = min(points, key=lambda p: (round(_log_distance(p[:3], (m, n, k)), 9), p[0] * p[1] * p[2]))
        flops += 2.0 * m * n * k
        seconds += 2.0 * m * n * k / (near[3] * 1e12)
    return flops / seconds


def model_matmuls(model: ModelConfig, tokens: int) -> list[tuple[int, int, int]]:
    """(m, n, k) of one forward's weight matmuls (a block's once per layer, then the head), m the tokens of
    a rank's micro-batch; backward's are their transposes, of the same FLOPs. The attention core, tensor
    parallel's split and MoE experts are left to launcher/compute/shape_rate.py."""
    d, f = model.d_model, ffn_width(model)
    block = [(tokens, f, d), (tokens, d, f)]  # the MLP (gpt: fc, proj; the mlp model's blocks)
    if model.arch == "llama":
        block.append((tokens, f, d))  # SwiGLU's third
    if model.arch != "mlp":
        q, kv = model.n_heads * head_dim(model), kv_heads(model) * head_dim(model)
        block += [(tokens, q + 2 * kv, d), (tokens, d, q)]  # q, k, v and the output projection
    return block * model.n_layers + [(tokens, model.vocab_size, d)]


def _log_distance(a: Sequence[int], b: Sequence[int]) -> float:
    return sum((math.log(x) - math.log(y)) ** 2 for x, y in zip(a, b, strict=True))


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
    return Link(
        name=f"profile {scope}",
        bandwidth_gbps=profile.busbw("all_reduce", scope, min(REFERENCE_BYTES, points[-1].bytes)),
        latency_s=points[0].latency_us * 1e-6 / (2 * (n - 1)),
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
    if doc.get("version") != SCHEMA_VERSION:
        raise ProfileError(
            f"{where}: schema version {doc.get('version')!r}, this launcher reads {SCHEMA_VERSION}; "
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
    if missing := sorted({s for _, s in collectives} - set(ranks)):
        raise ProfileError(f"no rank count for scope {missing[0]!r}")
    return SiteProfile(
        path=path,
        device_name=str(doc["device"]["name"]),
        matmul=matmul,
        mem_bw_gbs=_positive(doc["mem_bw_gbs"], "mem_bw_gbs"),
        collectives=collectives,
        scope_ranks=ranks,
    )


def for_plan(cfg: LauncherConfig) -> SiteProfile | None:
    """cluster.profile read (ProfileError: one line), None where it is not set."""
    return load(cfg.cluster.profile) if cfg.cluster.profile else None


def compute_rate(cfg: LauncherConfig, profile: SiteProfile, dtype: str) -> float:
    """FLOP/s the step's compute runs at on the profiled device: its matmuls' measured rate at the
    recipe's shapes (a rank's micro-batch of tokens); fp32 stands for tf32 on a profile without it."""
    if cfg.model._target_ is not None:
        raise ProfileError(
            f"cluster.profile={profile.path}: a `_target_` model's matmul shapes are not known to the plan; "
            "drop cluster.profile, or measure the model with a sweep and plan --from it"
        )
    dtype = dtype if dtype in profile.matmul or dtype != "tf32" else "fp32"
    return matmul_rate(profile, dtype, model_matmuls(cfg.model, cfg.batch.micro * cfg.model.seq_len))


def phrase(cfg: LauncherConfig, dtype: str) -> str:
    """What a plan on cluster.profile assumed, for its source line."""
    profile = load(str(cfg.cluster.profile))
    rate = compute_rate(cfg, profile, dtype)
    intra, inter = links(profile, LINKS[cfg.cluster.intra_link], LINKS[cfg.cluster.inter_link])
    return (
        f"{profile.device_name} measured ({profile.path}): {dtype} matmuls at {rate / 1e12:.3g} TFLOP/s at the model's "
        f"shapes; in-node {intra.bandwidth_gbps:.3g} GB/s α {intra.latency_s * 1e6:.3g} µs ({intra.name or 'preset'}), "
        f"{inter.name or 'preset'} {inter.bandwidth_gbps:.3g} GB/s α {inter.latency_s * 1e6:.3g} µs"
    )
