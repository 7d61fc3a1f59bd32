"""Pure rules of the bed's two limits, so every value and argument is unit-testable:

- a CPU share per node (`--cpus-per-node F`): a cgroup CPU quota of F CPUs around the node's
  slurmd and everything it starts;
- a link rate (`--link-rate 200mbit`): a `tc` token bucket (tbf) on both ends of each node's veth,
  so traffic between nodes is held to the rate both ways while ranks on one node talk over
  loopback, unshaped.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

CPU_RESERVE = 0.2
"""CPUs kept out of the nodes' shares for slurmctld, slurmdbd, MariaDB and the launcher."""
PERIOD_US = 5_000
"""CFS period. Short: with 100 ms a 10 ms micro-batch mostly runs unthrottled and now and then
waits 55 ms (median 7.3 ms, mean 17 ms at 0.45 CPU, measured); with 5 ms every micro-batch
spans several periods and takes its share's time (median 14.0 ms for 14.9 expected)."""
MIN_QUOTA_US = 1_000
"""The kernel's smallest CFS quota; a small share gets a longer period to keep it."""
MIN_CPUS = 0.01
WEIGHT = 10
"""A node's CPU weight, × the default (v1 cpu.shares 1024, v2 cpu.weight 100): the quota caps a
node's share, the weight keeps it when the machine is busy with other work (its other processes
get what the nodes leave, CPU_RESERVE at least)."""
OFF = ("0", "none", "off")
"""What removes a limit: `--cpus-per-node 0`, `--link-rate none`."""

_RATE_UNITS = {
    "bit": 1,
    "kbit": 10**3,
    "mbit": 10**6,
    "gbit": 10**9,
    "tbit": 10**12,
    # tc's byte units: `mbps` is megaBYTES per second.
    "bps": 8,
    "kbps": 8 * 10**3,
    "mbps": 8 * 10**6,
    "gbps": 8 * 10**9,
    "tbps": 8 * 10**12,
}
MIN_RATE_BIT = 10**6
"""Below 1 Mbit/s slurmd's own RPCs and a job's start-up crawl; no bed needs it."""
MAX_RATE_BIT = 100 * 10**9
TBF_LATENCY_MS = 10
"""Longest a packet may wait in the bucket's queue (its length is rate × this). Bulk TCP through it
reached the rate (less headers) from 32 KiB to 256 KiB of burst and 5 to 50 ms here."""
TBF_MIN_BURST = 64 * 1024
"""Bucket size: at least one 64 KiB GSO packet of a veth, else rate × 1 ms."""


@dataclass(kw_only=True, frozen=True)
class Limits:
    """What the bed holds each node to."""

    cpus_per_node: float = 0.0
    """CPUs' worth of time per node (a cgroup CPU quota); 0: none, the nodes share the cores."""
    link_rate_bit: int = 0
    """Bits per second of each node's link, each direction (tbf); 0: unshaped."""


RATE_HELP = "use tc's units: 200mbit, 1gbit, 1500kbit (bits/s) or 25mbps (bytes/s), or none to remove the shaping"


def parse_cpus(text: str) -> float:
    """`--cpus-per-node` → CPUs per node; 0 means no quota."""
    t = text.strip().lower()
    if t in OFF:
        return 0.0
    try:
        f = float(t)
    except ValueError:
        f = math.nan
    if not math.isfinite(f) or f < MIN_CPUS:
        raise ValueError(
            f"--cpus-per-node {text}: a node's CPU share must be a number ≥ {MIN_CPUS} "
            "(e.g. 0.45), or 0 to remove the quota"
        )
    return round(f, 4)


def check_cpus(cpus: float, nodes: int, cores: int) -> float:
    """The share if `nodes` nodes of `cpus` each fit this machine's `cores` with the reserve left."""
    if cpus == 0:
        return cpus
    room = cores - CPU_RESERVE
    if nodes * cpus > room + 1e-9:
        left = cores - nodes * cpus
        fit = math.floor(room / nodes * 100) / 100
        raise ValueError(
            f"--cpus-per-node {cpus:g} × {nodes} nodes = {nodes * cpus:.2f} CPUs leaves {left:.2f} of this "
            f"machine's {cores} cores for slurmctld, slurmdbd, MariaDB and the launcher (needs {CPU_RESERVE}); "
            f"use --cpus-per-node ≤ {fit:g} or fewer --nodes"
        )
    return cpus


def cfs_period_us(cpus: float) -> int:
    return max(PERIOD_US, math.ceil(MIN_QUOTA_US / cpus))


def cfs_quota_us(cpus: float) -> int:
    return round(cpus * cfs_period_us(cpus))


def quota_files(version: int, cpus: float) -> dict[str, str]:
    """File → text that sets (cpus > 0) or lifts (cpus = 0) a cgroup's CPU quota."""
    if version == 1:
        if cpus == 0:
            return {"cpu.cfs_quota_us": "-1"}
        # The period first: the kernel checks the quota against the period it has.
        return {"cpu.cfs_period_us": str(cfs_period_us(cpus)), "cpu.cfs_quota_us": str(cfs_quota_us(cpus))}
    return {"cpu.max": "max" if cpus == 0 else f"{cfs_quota_us(cpus)} {cfs_period_us(cpus)}"}


def weight_files(version: int, nodes: int = 1) -> dict[str, str]:
    """File → text of the CPU weight of a node's cgroup (nodes=1), or of the folder holding `nodes` of them."""
    if version == 1:
        return {"cpu.shares": str(min(262_144, 1024 * WEIGHT * nodes))}
    return {"cpu.weight": str(min(10_000, 100 * WEIGHT * nodes))}


def describe_cpus(cpus: float, version: int | None, cores: int) -> str:
    if cpus == 0:
        return (
            f"cpu per node: unlimited (the nodes share this machine's {cores} cores; "
            "`launcher cluster up --cpus-per-node 0.45` gives each a fixed share)"
        )
    how = (
        f"cgroup v1 quota {cfs_quota_us(cpus)}/{cfs_period_us(cpus)} µs"
        if version == 1
        else f"cgroup v2 cpu.max {cfs_quota_us(cpus)} {cfs_period_us(cpus)}"
    )
    return f"cpu per node: {cpus:g} ({how})"


# ---------------------------------------------------------------- the link


def parse_rate(text: str) -> int:
    """`--link-rate` → bits per second; 0 means unshaped. Units as tc's, decimal (k = 1000)."""
    t = text.strip().lower()
    if t in OFF:
        return 0
    m = re.fullmatch(r"(\d+(?:\.\d+)?)\s*([a-z]+)", t)
    if not m or m.group(2) not in _RATE_UNITS:
        raise ValueError(f"--link-rate {text}: not a rate; {RATE_HELP}")
    # tc keeps a rate in bytes per second.
    bits = round(float(m.group(1)) * _RATE_UNITS[m.group(2)] / 8) * 8
    if not MIN_RATE_BIT <= bits <= MAX_RATE_BIT:
        raise ValueError(f"--link-rate {text}: the bed shapes links from 1mbit to 100gbit; {RATE_HELP}")
    return bits


def rate_text(bits: int) -> str:
    """200000000 → "200mbit" (tc's notation, the largest exact unit)."""
    for name, unit in (("gbit", 10**9), ("mbit", 10**6), ("kbit", 10**3)):
        if bits % unit == 0:
            return f"{bits // unit}{name}"
    return f"{bits}bit"


def tbf_burst(bits: int) -> int:
    return max(TBF_MIN_BURST, math.ceil(bits / 8 / 1000))


def tbf_args(bits: int) -> list[str]:
    """The qdisc's arguments after `root`."""
    return ["tbf", "rate", f"{bits}bit", "burst", str(tbf_burst(bits)), "latency", f"{TBF_LATENCY_MS}ms"]


def tc_argv(tc: str, dev: str, bits: int, netns: str | None = None) -> list[str]:
    """`tc` that shapes `dev` (in `netns` when given) at `bits`/s, replacing any root qdisc; or,
    with bits 0, deletes the root qdisc (back to the device's default)."""
    where = ["-n", netns] if netns else []
    if bits == 0:
        return [tc, *where, "qdisc", "del", "dev", dev, "root"]
    return [tc, *where, "qdisc", "replace", "dev", dev, "root", *tbf_args(bits)]


def shaped_at(tc_json: list[dict]) -> int:
    """Bits/s of the root tbf in `tc -j qdisc show dev X`'s output (0: none)."""
    for q in tc_json:
        if q.get("root") and q.get("kind") == "tbf":
            return int(q.get("options", {}).get("rate", 0)) * 8
    return 0


def describe_link(bits: int) -> str:
    if bits == 0:
        return "link: unshaped (veth, memory speed; `launcher cluster up --link-rate 200mbit` shapes it)"
    return (
        f"link: {rate_text(bits)} ({bits / 8e6:g} MB/s) tbf on each node's veth, both directions; "
        "ranks on one node talk over loopback, unshaped"
    )
