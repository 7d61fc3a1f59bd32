"""Context parallelism's communication: torch's ring attention (engines/context_parallel.py).
Pure: no I/O, no torch.

Per layer and pass, on a ring of n = cp ranks, each exchange sends this rank's keys and values
(Traffic.cp_bytes) to the next rank while the current ones' attention runs (torch posts the
send before computing): forward n − 1 exchanges, backward n − 1 of keys and values plus n of
their gradients (the last waited for after the loop). With s one exchange's point-to-point time
and f one ring step's share of a layer's forward attention (backward's is 2f):

    total   = (n − 1)·s · (1 + recompute)  +  (2n − 1)·s
    exposed = (n − 1)·max(0, s − f) · (1 + recompute)  +  (n − 1)·max(0, 2s − 2f)  +  s

times the layers and the passes (recompute: 1 under full activation checkpointing, whose
backward replays the forward ring). The gradients of the cp ranks need no collective of their
own: FSDP's group is dp × cp (overlap.py's dp part)."""

from __future__ import annotations

from launcher.perf.comm import Group, Topology, Traffic, p2p_s
from launcher.perf.links import Link

ATTENTION_PASSES = 3
"""An attention core's forward + backward FLOPs in forwards: backward costs two."""


def ring_s(t: Traffic, g: Group, topo: Topology, intra: Link, inter: Link, *, pass_s: float) -> tuple[float, float]:
    """(total, exposed) seconds of the cp ring per optimizer step; `pass_s`: one pass's compute."""
    n = g.size
    if n == 1 or not t.cp_bytes or not t.cp_layers:
        return 0.0, 0.0
    s = p2p_s(t.cp_bytes, not topo.on_nvlink(g), intra, inter, topo.nics_per_node / topo.ranks_per_node)
    f = pass_s * t.attention_share / ATTENTION_PASSES / t.cp_layers / n
    forwards = 2 if t.cp_recompute else 1
    total = forwards * (n - 1) * s + (2 * n - 1) * s
    exposed = forwards * (n - 1) * max(0.0, s - f) + (n - 1) * max(0.0, 2 * s - 2 * f) + s
    return t.passes * t.cp_layers * total, t.passes * t.cp_layers * exposed
