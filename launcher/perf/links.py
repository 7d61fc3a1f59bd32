"""Interconnects as the model sees them: a bus bandwidth and a per-hop latency per link, the
nominal presets a cluster names (the NVLink 3/4/5, InfiniBand NDR/XDR and RoCE ones with their
per-direction link rate and the NCCL bus bandwidth it yields apart, each with its source), and the
ring all-reduce time over one link. Pure: no I/O."""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
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
    link_rate_gbps: float | None = None
    """The vendor's per-direction rate of one GPU's link (NVLink: all its links together; a NIC: its
    port), GB/s: what the hardware signals, of which NCCL's protocols deliver `bandwidth_gbps` as bus
    bandwidth. None for the older presets, which set `bandwidth_gbps` to a nominal rate."""
    source: str = ""
    """Where the rate and the bus bandwidth come from."""
    overlap: float = 1.0
    """Share of a collective's time on this link that compute running at once hides, in [−1, 1] (a site
    profile measures it: 1 where the two run side by side untouched, as the overlap model has it; less where
    they contend, e.g. for a gloo rank's host CPU; negative where both at once cost more than in turn)."""

    def __post_init__(self) -> None:
        if not (math.isfinite(self.bandwidth_gbps) and self.bandwidth_gbps > 0):
            raise ValueError(f"link {self.name!r}: bandwidth_gbps must be finite and > 0, got {self.bandwidth_gbps}")
        if not (math.isfinite(self.latency_s) and self.latency_s >= 0):
            raise ValueError(f"link {self.name!r}: latency_s must be finite and ≥ 0, got {self.latency_s}")
        if not -1.0 <= self.overlap <= 1.0:
            raise ValueError(f"link {self.name!r}: overlap must be in [-1, 1], got {self.overlap}")

    def to_dict(self) -> dict:
        return {"name": self.name, "bandwidth_gbps": self.bandwidth_gbps, "latency_s": self.latency_s}


def ring_latency_s(timed: Sequence[tuple[float, float]], n: int, busbw_gbs: float) -> float:
    """α of a ring of `n` ranks from all-reduces timed at several sizes, (bytes, seconds) each: what each took
    beyond its bytes at `busbw_gbs`, over the ring's 2(n−1) hops, the median over sizes. One size's time alone
    (the smallest) is as noisy as one stall: a rank held up once (a CPU quota's throttled period, a page
    fault) would set it for every message."""
    left = [max(0.0, seconds - nbytes * 2 * (n - 1) / n / (busbw_gbs * 1e9)) for nbytes, seconds in timed]
    return statistics.median(left) / (2 * (n - 1))


NCCL_NVLINK_SHARE = 370 / 450
"""NCCL's ring bus bandwidth over NVLink ÷ its line rate: "450GB/s is the line rate. With the protocol
overhead (~20%) NCCL can get an effective NVLink bandwidth of 370GB/s" (H100, S. Jeaugey of NCCL,
https://github.com/NVIDIA/nccl-tests/issues/212); NVLink SHARP all-reduces reach more (≈ 480 on 8 H100s),
which the ring model here does not count."""
NCCL_NIC_SHARE = 0.9
"""…over one InfiniBand/RoCE NIC: 45 of 50 GB/s (the 40–50 GB/s all-reduce bus bandwidth of NDR nodes
without NVLink, "Validating Multi-Node GPU Clusters with NCCL Tests",
https://saturncloud.io/blog/crusoe-nccl-cluster-validation); taken for XDR and RoCE too (not measured here)."""


def _preset(name: str, rate: float, share: float, latency_s: float, source: str) -> Link:
    return Link(
        name=name, link_rate_gbps=rate, bandwidth_gbps=round(rate * share, 1), latency_s=latency_s, source=source
    )


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
    # Per-direction link rate (vendor) and NCCL ring bus bandwidth (that rate × the share above) apart:
    "nvlink3": _preset(
        "nvlink3",
        300.0,
        NCCL_NVLINK_SHARE,
        3e-6,
        "A100: 12 NVLink 3 links × 25 GB/s per direction (600 GB/s "
        "both ways), NVIDIA A100 datasheet https://www.nvidia.com/en-us/data-center/a100/; 8×A100 measure 230–250 "
        "GB/s busbw (https://docs.alayanew.com/en/docs/tech-blog/2026-05-06-nccl-tests)",
    ),
    "nvlink4": _preset(
        "nvlink4",
        450.0,
        NCCL_NVLINK_SHARE,
        3e-6,
        "H100/H200: 18 NVLink 4 links × 25 GB/s per direction "
        "(900 GB/s both ways), https://www.nvidia.com/en-us/data-center/h100/; busbw 370 per nccl-tests#212",
    ),
    "nvlink5": _preset(
        "nvlink5",
        900.0,
        NCCL_NVLINK_SHARE,
        3e-6,
        "B200/GB200: 18 NVLink 5 links × 50 GB/s per direction "
        "(1.8 TB/s both ways), https://www.nvidia.com/en-us/data-center/gb200-nvl72/; across an NVL72 domain too; "
        "busbw: H100's 370/450 assumed (not measured here)",
    ),
    "ib_ndr": _preset(
        "ib_ndr",
        50.0,
        NCCL_NIC_SHARE,
        5e-6,
        "InfiniBand NDR, 400 Gb/s per port (ConnectX-7), https://www.nvidia.com/en-us/networking/quantum2/",
    ),
    "ib_xdr": _preset(
        "ib_xdr",
        100.0,
        NCCL_NIC_SHARE,
        5e-6,
        "InfiniBand XDR, 800 Gb/s per port (ConnectX-8, Quantum-X800), "
        "https://www.nvidia.com/en-us/networking/products/infiniband/quantum-x800/",
    ),
    "roce400": _preset(
        "roce400",
        50.0,
        NCCL_NIC_SHARE,
        5e-6,
        "RoCE over 400 GbE per NIC (Spectrum-X, ConnectX-7; Llama 3's "
        "fabric, arXiv 2407.21783 §3.3.1), https://www.nvidia.com/en-us/networking/spectrumx/",
    ),
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
