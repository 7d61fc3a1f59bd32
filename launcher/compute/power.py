"""A board power limit below the device's TDP, and the share of its compute rate the device keeps under it
(pure: no torch).

A GPU holds its board power limit (`nvidia-smi -pl`, `cluster.power_limit_w`) by lowering its clock. CMOS
dynamic power is P = A·C·V²·f (Mudge, "Power: A First-Class Architectural Design Constraint", IEEE Computer
34(4), 2001), and along the voltage/frequency curve the voltage is raised linearly with the clock, so
"ramping voltage up linearly with clock frequency results in dynamic power consumption with a cubic
dependence on f" (Greaves, System-on-Chip Design notes, University of Cambridge Computer Laboratory, power
and DVFS). A training step's matmuls hold the board at its TDP at the full clock, so under a limit L the
clock, and every rate that follows it, is (L ÷ TDP)^(1/3) of nominal: 0.89 for an H100 SXM held at 500 W of
its 700 W. Static power, which does not fall with the clock, would cost more than this: it is the mild end.
The whole compute rate is scaled, memory-bound operations (a few % of a step on these devices) included.
"""

from __future__ import annotations

import math

from launcher.compute.peaks import find_device
from launcher.config.errors import ConfigError

TDP_W: dict[str, tuple[float, str]] = {
    # peak-table row (compute/peaks.py) → (TDP in W, the datasheet line)
    "A100 SXM4": (400.0, "NVIDIA A100 Tensor Core GPU Datasheet: Max TDP Power 400W (SXM)"),
    "H100 SXM5": (700.0, "NVIDIA H100 Tensor Core GPU Datasheet: Max thermal design power (TDP) up to 700W (SXM)"),
    "H100 PCIe": (350.0, "NVIDIA H100 Tensor Core GPU Datasheet: Max TDP 300-350W (PCIe, configurable)"),
    "H200 SXM": (700.0, "NVIDIA H200 Tensor Core GPU Datasheet: Max TDP up to 700W (SXM, configurable)"),
    "B200 (HGX)": (1000.0, "NVIDIA HGX B200 specifications: 1,000 W a GPU"),
}
"""The board power a device's peaks are rated at, by the peak-table row its name matches."""


def tdp_w(device_name: str | None) -> float | None:
    """The TDP of the device `device_name` names, W; None where the table has none (a bare "A100": SXM or PCIe)."""
    row = find_device(device_name)
    return TDP_W[row.device][0] if row is not None and row.device in TDP_W else None


def clock_share(device_name: str | None, power_limit_w: float | None) -> float:
    """The share of its nominal compute rate a device keeps at `power_limit_w` (1 without a limit): the cube root
    of the limit's share of the TDP. ConfigError (one line, a fix) for a limit the device's TDP cannot place."""
    if power_limit_w is None:
        return 1.0
    tdp = tdp_w(device_name)
    if tdp is None:
        known = ", ".join(f"{name} ({w:g} W)" for name, (w, _) in TDP_W.items())
        raise ConfigError(
            f"cluster.power_limit_w={power_limit_w:g} needs the TDP of cluster.device_name={device_name!r}, which "
            f"compute/power.py does not know; name one of {known}, or set cluster.power_limit_w=null"
        )
    if not (math.isfinite(power_limit_w) and 0 < power_limit_w <= tdp):
        raise ConfigError(
            f"cluster.power_limit_w={power_limit_w:g} is not in (0, {tdp:g}] W, the TDP of {device_name!r} "
            f"(a board cannot be held above it); set e.g. cluster.power_limit_w={tdp * 5 / 7:g}, or null"
        )
    return (power_limit_w / tdp) ** (1 / 3)
