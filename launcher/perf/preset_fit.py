"""The constants `launcher plan` assumes on presets, fitted on published runs, not chosen:
benchmarks/published_replay.py replays benchmarks/data/published_scaling.csv through `plan`,
fits the share of peak FLOP/s the compute achieves per device and precision, and writes them
with the spread of its leave-one-source-out errors to preset_fit.json (shipped in the package).
Here that file is read (and written, so its shape has one home). Pure: no torch."""

from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass, field
from pathlib import Path

from launcher.compute.peaks import find_device
from launcher.config.errors import ConfigError
from launcher.io import atomic_write_text

PACKAGED = Path(__file__).with_name("preset_fit.json")
"""The fitted constants, written by benchmarks/published_replay.py."""


@dataclass(kw_only=True, frozen=True)
class PresetFit:
    """What the replay of published runs fitted, and how sure it is."""

    mfu: dict[str, float]
    """Share of peak the compute achieves, per `device/precision` key (`fit_key`): the default
    of `--assume-mfu`. Recomputed FLOPs count as work, so it is the MFU of a run without
    activation checkpointing."""
    mfu_any_device: float
    """The same fitted on every device at once: the default for a device the replay never saw."""
    interval_log: float
    """Quantile `quantile` of |ln(predicted / published)| per-GPU throughput over the replay's
    leave-one-source-out predictions: the preset interval is × / ÷ exp(interval_log)."""
    quantile: float
    """Coverage the interval is the quantile for (0.9: 9 in 10 published rows fell inside)."""
    rows: int
    """Published rows the constants were fitted on."""
    sources: int
    """Sources those rows come from (each weighted alike, whatever its row count)."""
    made_by: str
    """Command, commit and date of the replay that wrote the file."""
    rows_by_key: dict[str, int] = field(default_factory=dict)
    """Rows behind each `mfu` entry."""
    jitter: float | None = None
    """Straggler jitter s on GPUs (perf/stragglers.py), fitted on the published efficiency pairs; None in a
    file written before it (stragglers.STEP_JITTER then serves)."""
    curves: dict[str, list[float]] = field(default_factory=dict)
    """Matmul efficiency curves (compute/shape_rate.Curve: [e_max, s_half]; bf16's s_half 0, unused: its
    shape is compute/gemm_shape's) per `fit_key`, fp8's also
    per fp8 stack (`H100/fp8-torchao`, `H100/fp8-te`; curve_keys), and per precision over every device
    (`*/bf16`, `*/fp8`): with them the presets' compute comes from the
    recipe's operations (perf/compute_term.py) and MFU is an output; without (a file written before
    them) the `mfu` constants serve as before."""

    def __post_init__(self) -> None:
        values = [*self.mfu.values(), self.mfu_any_device]
        if not all(0 < v <= 1 for v in values) or not (self.interval_log >= 0 and 0 < self.quantile < 1):
            raise ValueError(
                f"preset fit out of range: mfu {values}, interval_log {self.interval_log}, quantile {self.quantile}"
            )

    @property
    def rel_half_width(self) -> float:
        """The interval as the preset step-time model's relative half-width h (its T/(1 + h) is
        T·exp(−interval_log)); plan's table itself shows T × / ÷ exp(interval_log)."""
        return math.expm1(self.interval_log)

    def mfu_for(self, device_name: str | None, dtype: str) -> tuple[float, str]:
        """(assumed MFU, where it comes from) for a device name and math precision."""
        key = fit_key(device_name, dtype)
        if key in self.mfu:
            family = device_family(device_name)
            chip = f" ({family}: the same chip)" if family in SAME_CHIP else ""
            return self.mfu[key], f"fitted on {self.rows_by_key.get(key, '?')} published {key} runs{chip}"
        return self.mfu_any_device, f"fitted on {self.rows} published runs of every device ({key} not among them)"

    def curve_for(self, device_name: str | None, dtype: str) -> tuple[list[float], str] | None:
        """([e_max, s_half], which fit) for a device and precision, the first of `curve_keys` the file
        has (fp8: the launcher's stack's curve, FP8_STACK); None where it has none of them."""
        for i, key in enumerate(curve_keys(fit_key(device_name, dtype))):
            if key in self.curves:
                own = curve_keys(fit_key(device_name, dtype))[0]
                said = f"{key} runs" if i == 0 else f"{_described(key)} ({own} has no curve of its own)"
                return self.curves[key], said
        return None


FP8_STACK = "torchao"
"""The fp8 stack of the launcher's own trainer (launcher/train/float8.py: torchao's float8 linear layers,
tensorwise dynamic scaling): the fp8 curve its plans read (curve_keys)."""


def curve_keys(key: str, fp8_stack: str | None = FP8_STACK) -> list[str]:
    """Where a fit key's matmul curve is looked up, first found first. fp8 is fitted per stack
    (`H100/fp8-torchao`, benchmarks/replay_curve.py) where MIN_SOURCES sources of that stack back it, so
    the lookup falls back in this order: the stack's curve on the device, the device's fp8 curve over
    every stack (`H100/fp8`: each row priced with its own stack's casts), every device's (`*/fp8`)."""
    family, precision = key.split("/")
    if precision != "fp8" or fp8_stack is None:
        return [key, f"*/{precision}"]
    return [f"{family}/{precision}-{fp8_stack}", key, f"*/{precision}"]


def _described(key: str) -> str:
    family, precision = key.split("/")
    if family == "*":
        return f"every device's {precision} runs"
    return f"{key} runs of every fp8 stack" if precision == "fp8" else f"{key} runs"


SAME_CHIP = {"H200": "H100"}
"""Device families whose MFU is fitted on another's published runs. The H200 is the H100's GH100 chip with
more, faster memory (the same peaks in the table), and the published corpus has no H200 run; on one H200
(benchmarks/results/fp8_speedup.md, llama3_8b's width) bf16 ran at MFU 0.429 and fp8 at 0.346, where the
H100 fits are 0.4325 and 0.350."""


def fit_key(device_name: str | None, dtype: str) -> str:
    """`A100/bf16`: the peak table's device family (every A100 variant shares its peaks, so the
    share of peak carries over; SAME_CHIP's families share another's) and the math precision (fp16
    runs at bf16's rate)."""
    family = device_family(device_name)
    return f"{SAME_CHIP.get(family, family)}/{'bf16' if dtype == 'fp16' else dtype}"


def device_family(device_name: str | None) -> str:
    """The peak table's family of a device name ("H100" for "NVIDIA H100 80GB HBM3"), else the name."""
    row = find_device(device_name)
    return row.device.split()[0] if row is not None else (device_name or "unknown")


def load(path: Path = PACKAGED) -> PresetFit:
    """The fitted constants; one line naming the file when it is missing or damaged."""
    try:
        doc = json.loads(Path(path).read_text())
        return PresetFit(**{k: doc[k] for k in PresetFit.__dataclass_fields__ if k in doc})
    except (OSError, ValueError, TypeError, KeyError) as exc:
        raise ConfigError(
            f"the preset constants {str(path)!r} cannot be read ({exc}); reinstall launcher or rerun "
            "benchmarks/published_replay.py, or pass --assume-mfu"
        ) from None


def save(fit: PresetFit, path: Path = PACKAGED) -> None:
    """Written by the replay; sorted keys so a rerun's diff shows only what changed."""
    doc = {
        "about": "written by benchmarks/published_replay.py from benchmarks/data/published_scaling.csv; "
        "do not edit by hand",
        **asdict(fit),
    }
    atomic_write_text(path, json.dumps(doc, indent=1, sort_keys=True) + "\n")
