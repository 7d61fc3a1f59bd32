"""Interconnects as the model sees them: a bus bandwidth and a per-hop latency per link, the
nominal presets a cluster names, and the ring all-reduce time over one link. Pure: no I/O."""

from __future__ import annotations

import math
from dataclasses import dataclass


@dataclass(kw_only=True, frozen=True)
class Link:
    """One interconnect: bandwidth and latency of a ring all-reduce over it."""

    bandwidth_gbps: float
    """Bus bandwidth B in GB/s (1e9 bytes/s, not gigabits), as nccl-tests reports `busbw`."""
    latency_s: float
    """Per-hop latency α of the ring, seconds; a ring all-reduce pays 2(n−1) of them."""
    name: str = ""
    """Preset or origin name, for reports."""

    def __post_init__(self) -> None:
        if not (math.isfinite(self.bandwidth_gbps) and self.bandwidth_gbps > 0):
            raise ValueError(f"link {self.name!r}: bandwidth_gbps must be finite and > 0, got {self.bandwidth_gbps}")
        if not (math.isfinite(self.latency_s) and self.latency_s >= 0):
            raise ValueError(f"link {self.name!r}: latency_s must be finite and ≥ 0, got {self.latency_s}")

    def to_dict(self) -> dict:
        return {"name": self.name, "bandwidth_gbps": self.bandwidth_gbps, "latency_s": self.latency_s}


# Bandwidths are nominal per-GPU link rates; real NCCL bus bandwidth is usually lower, which is why
# `fit` replaces them as soon as all-reduces are measured. Latencies are the order of magnitude of
# NCCL's small-message per-hop cost on each transport (µs on NVLink/PCIe/InfiniBand, tens of µs
# over TCP sockets), not vendor figures.
LINKS: dict[str, Link] = {
    # A100 NVLink 3: 12 links × 25 GB/s per direction × 2 directions.
    "nvlink": Link(bandwidth_gbps=600.0, latency_s=3e-6, name="nvlink"),
    # PCIe 4.0 x16: 31.5 GB/s raw per direction, ≈ 25 GB/s after packet overhead.
    "pcie": Link(bandwidth_gbps=25.0, latency_s=5e-6, name="pcie"),
    # InfiniBand NDR: 400 Gb/s per port = 50 GB/s.
    "ib400": Link(bandwidth_gbps=50.0, latency_s=5e-6, name="ib400"),
    # InfiniBand HDR: 200 Gb/s per port = 25 GB/s.
    "ib200": Link(bandwidth_gbps=25.0, latency_s=5e-6, name="ib200"),
    # 100 GbE = 12.5 GB/s; NCCL's socket transport adds tens of µs per hop.
    "eth100": Link(bandwidth_gbps=12.5, latency_s=30e-6, name="eth100"),
    # 10 GbE = 1.25 GB/s.
    "eth10": Link(bandwidth_gbps=1.25, latency_s=50e-6, name="eth10"),
}


def ring_terms(nbytes: float, n: int) -> tuple[float, float]:
    """(x1, x2) of the ring model t = x1 / B + x2 · α: bytes each rank moves, and hops."""
    return 2.0 * (n - 1) / n * nbytes, 2.0 * (n - 1)


def ring_allreduce_s(nbytes: float, n: int, link: Link, *, messages: int = 1) -> float:
    """Seconds of a ring all-reduce of `nbytes` over `n` ranks: 2(n−1)/n · S / B + 2(n−1) · α,
    the latency paid once per message when the bytes go in `messages` all-reduces (DDP's buckets).

    With several ranks per node the ring (ranks in node order) crosses each node's link once each
    way, so that link carries the same 2(n−1)/n · S as a rank does and paces every step: `link` is
    the slowest one the ring uses (the inter-node link as soon as it spans nodes)."""
    if n < 1:
        raise ValueError(f"an all-reduce needs n ≥ 1 ranks, got {n}")
    if not (nbytes >= 0 and math.isfinite(nbytes)):
        raise ValueError(f"an all-reduce needs finite nbytes ≥ 0, got {nbytes}")
    if messages < 1:
        raise ValueError(f"an all-reduce goes in ≥ 1 messages, got {messages}")
    if n == 1:
        return 0.0
    x1, x2 = ring_terms(nbytes, n)
    return x1 / (link.bandwidth_gbps * 1e9) + messages * x2 * link.latency_s
