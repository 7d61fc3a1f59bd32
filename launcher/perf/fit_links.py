"""Stage 1 of calibrating the model: the links (B, α) from the collectives trials timed
(`step.Observation`: all-reduce probes of the dp or pp group, tensor-parallel collectives), each
link class from the groups that used it, on the model's own cost of a collective (`comm`: a
group spanning nodes gets g·k/rpn of the node's NICs, NCCL may take its tree). Pure."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from launcher.perf.comm import Group, allreduce_hops
from launcher.perf.links import Link
from launcher.perf.lstsq import nonnegative, rank
from launcher.perf.step import Observation


def _fit_link(
    samples: list[tuple[float, float, float, float]], preset: Link, label: str, noun: str
) -> tuple[Link, str]:
    """Stage 1 for one link class: (B, α) from measured collectives, each as (bytes term x1, hops
    x2, seconds, and the seconds of the largest all-reduce its trial measured), t = x1 / B + x2 · α,
    least squares on that trial's scale."""
    if not samples:
        return preset, f"preset {preset.name or 'link'} (no {label} {noun} over ≥ 2 ranks measured)"
    x = np.array([(x1, x2) for x1, x2, _, _ in samples])
    t = np.array([s for _, _, s, _ in samples])
    # Rows divided by their trial's largest all-reduce (the gradient's, which steps pay): trials
    # from 10 µs to 1 s weigh alike, and within one a miss counts as a share of what the step
    # pays, not of a probe 64× smaller. Dividing each row by its own time instead let the small
    # probes' latency steer the bandwidth: on the bed (CPU-throttled ranks, latency that overlaps
    # transfer) that read 36 MB/s off a 25 MB/s link.
    ref = np.array([r for _, _, _, r in samples])
    a, y = x / ref[:, None], t / ref
    name = f"{preset.name} (fitted)" if preset.name else "fitted"
    if not np.any(x[:, 0] > 0):
        # Only empty messages: latency is all they show.
        link = _latency_under_preset(a, y, preset, name)
        return link, f"latency fitted from {len(t)} zero-byte {noun}; bandwidth preset {preset.name or 'link'}"
    if rank(x) >= 2:
        return _fit_bandwidth_and_latency(a, y, preset, name, noun)
    return _fit_bandwidth_only(a, y, t, preset, name, noun)


def _latency_under_preset(a: np.ndarray, y: np.ndarray, preset: Link, name: str) -> Link:
    """α fitted with the bandwidth held at the preset's (columns of `a`: bytes, hops; `y` the
    times, both on the trials' scale)."""
    preset_inv_bw = 1.0 / (preset.bandwidth_gbps * 1e9)
    (alpha,) = nonnegative(a[:, [1]], y - a[:, 0] * preset_inv_bw)
    return Link(bandwidth_gbps=preset.bandwidth_gbps, latency_s=float(alpha), name=name)


def _fit_bandwidth_and_latency(a: np.ndarray, y: np.ndarray, preset: Link, name: str, noun: str) -> tuple[Link, str]:
    """Several (size, ranks) directions: both B and α are visible."""
    m = len(a)
    inv_bw, alpha = nonnegative(a, y)
    if inv_bw > 0:
        note = " (latency at bound 0)" if alpha == 0 else ""
        link = Link(bandwidth_gbps=float(1.0 / (inv_bw * 1e9)), latency_s=float(alpha), name=name)
        return link, f"fitted from {m} {noun}: bandwidth and latency{note}"
    # Times flat in message size: no bandwidth to see, so keep the preset and fit α under it.
    return _latency_under_preset(a, y, preset, name), (
        f"latency fitted from {m} {noun}; bandwidth preset {preset.name or 'link'} "
        "(times do not grow with message size)"
    )


def _fit_bandwidth_only(
    a: np.ndarray, y: np.ndarray, t: np.ndarray, preset: Link, name: str, noun: str
) -> tuple[Link, str]:
    """One direction only (one rank count and one message size): the split between bandwidth and
    latency is invisible, so trust the preset latency and attribute the rest to bandwidth."""
    m = len(a)
    (inv_bw,) = nonnegative(a[:, [0]], y - a[:, 1] * preset.latency_s)
    if inv_bw > 0:
        link = Link(bandwidth_gbps=float(1.0 / (inv_bw * 1e9)), latency_s=preset.latency_s, name=name)
        return link, (
            f"bandwidth fitted from {m} {noun}; latency preset {preset.name or 'link'} "
            f"{preset.latency_s:g} s (one direction of (size, ranks) cannot separate them)"
        )
    # The preset latency alone already exceeds the measured times: it is wrong for this link.
    (inv_bw,) = nonnegative(a[:, [0]], y)
    link = Link(bandwidth_gbps=float(1.0 / (inv_bw * 1e9)), latency_s=0.0, name=name)
    return link, (
        f"bandwidth fitted from {m} {noun}; latency set to 0 (preset {preset.latency_s:g} s "
        f"alone exceeds the measured {float(t.min()):g} s)"
    )


def _rows(o: Observation) -> list[tuple[bool, float, float, float, float]]:
    """A trial's timed collectives as (spans nodes, x1, x2, seconds, reference seconds): the
    bytes term over the share of the inter-node links the group gets (`comm`), so B comes out
    per NIC, and the hops of the algorithm the model charges."""
    topo = o.shape.topology
    probed = o.shape.groups.pp if o.probe_group == "pp" else o.shape.groups.dp
    ref = max((s for _, _, s in o.allreduce), default=0.0)
    rows = []
    for n, nbytes, seconds in o.allreduce:
        if n < 2:
            continue
        g = Group(size=n, per_node=min(n, probed.per_node))
        share = topo.share(g) if g.spans_nodes else 1.0
        rows.append((g.spans_nodes, 2.0 * (n - 1) / n * nbytes / share, allreduce_hops(g, topo), seconds, ref))
    tp = o.shape.groups.tp
    for n, nbytes, count, seconds in o.gathers:
        if n < 2:
            continue
        g = Group(size=n, per_node=min(n, tp.per_node))
        share = topo.share(g) if g.spans_nodes else 1.0
        rows.append((g.spans_nodes, (n - 1) / n * nbytes / share, float(count * (n - 1)), seconds, seconds))
    return rows


def fit_links(obs: Sequence[Observation], intra: Link, inter: Link) -> tuple[Link, Link, dict[str, str]]:
    """Both link classes, each from the collectives of the groups that used it."""
    rows = [r for o in obs for r in _rows(o)]
    noun = "collectives" if any(o.gathers for o in obs) else "all-reduces"
    intra_fit, intra_src = _fit_link([r[1:] for r in rows if not r[0]], intra, "intra-node", noun)
    inter_fit, inter_src = _fit_link([r[1:] for r in rows if r[0]], inter, "inter-node", noun)
    return intra_fit, inter_fit, {"intra": intra_src, "inter": inter_src}
