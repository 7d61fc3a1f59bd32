"""What the GPU itself reported during the timed steps: NVML's utilisation, memory used and power
of each rank's own GPU, read on a background thread every INTERVAL_S, summarised per rank and
merged into the record (`metrics.nvml`). Where there is no NVIDIA GPU, driver or nvidia-ml-py,
every figure is null and `reason` says why, so a null never reads as "idle".

One sampler per process: a rank drives one GPU, and the loop marks the end of warm-up deep in
its step loop (timed_window_starts), where passing an object around would thread it through
every call for one line.
"""

from __future__ import annotations

import statistics
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, fields
from typing import Any

import torch

INTERVAL_S = 0.1
"""Seconds between two readings: NVML's utilisation is itself an average over 1/6 s to 1 s, so
faster reading adds no information, and 10 calls a second cost the training thread nothing."""
NOT_INSTALLED = "nvidia-ml-py is not installed; pip install nvidia-ml-py"
_NO_DRIVER = ("NVMLError_LibraryNotFound", "NVMLError_DriverNotLoaded")


@dataclass(kw_only=True, frozen=True)
class Reading:
    """One reading of one GPU; a quantity this GPU does not report (MIG, some boards) is None."""

    gpu_util_pct: float | None
    """Percent of the last sample period in which a kernel ran (nvidia-smi's GPU-Util)."""
    memory_used_bytes: int | None
    """Device memory in use, by every process on the GPU."""
    power_w: float | None
    """Board power draw, watts."""


@dataclass(kw_only=True, frozen=True)
class Summary:
    """One rank's readings over the timed window: mean and max of each quantity."""

    samples: int
    """Readings taken in the window (0: none, see `reason`)."""
    gpu_util_pct_mean: float | None
    """Mean GPU utilisation, percent."""
    gpu_util_pct_max: float | None
    """Highest GPU utilisation, percent."""
    memory_used_bytes_mean: float | None
    """Mean device memory used, bytes."""
    memory_used_bytes_max: int | None
    """Most device memory used, bytes."""
    power_w_mean: float | None
    """Mean power draw, watts."""
    power_w_max: float | None
    """Highest power draw, watts."""
    reason: str | None
    """Why figures are null (no GPU, no driver, nvidia-ml-py missing, not reported); None when all are there."""


FIGURES = [f.name for f in fields(Summary) if f.name not in ("samples", "reason")]


def unavailable(reason: str) -> Summary:
    """A summary with every figure null, saying why."""
    return Summary(samples=0, reason=reason, **{name: None for name in FIGURES})


def summarize(readings: list[Reading], reason: str | None = None) -> Summary:
    """Mean and max of each quantity over `readings`; a quantity absent from all of them is null
    and named in the summary's reason, after `reason` (why the readings stopped or never began)."""
    if not readings:
        return unavailable(reason or "no NVML reading fell in the timed window")
    out: dict[str, Any] = {}
    missing = []
    for quantity in ("gpu_util_pct", "memory_used_bytes", "power_w"):
        values = [getattr(r, quantity) for r in readings if getattr(r, quantity) is not None]
        out[f"{quantity}_mean"] = statistics.fmean(values) if values else None
        out[f"{quantity}_max"] = max(values) if values else None
        if not values:
            missing.append(quantity)
    said = [reason, f"NVML does not report {', '.join(missing)} on this GPU" if missing else None]
    return Summary(samples=len(readings), reason="; ".join(r for r in said if r) or None, **out)


def merge(per_rank: list[dict[str, Any]]) -> dict[str, Any]:
    """Every rank's Summary (as dicts) → the record's `metrics.nvml`: the mean of the ranks' means
    (each rank's GPU weighs the same), the max of their maxes, each rank's own summary, and the
    ranks' distinct reasons (prefixed by rank where they differ)."""
    out: dict[str, Any] = {"interval_s": INTERVAL_S}
    for name in FIGURES:
        values = [r[name] for r in per_rank if r.get(name) is not None]
        pick = max if name.endswith("_max") else statistics.fmean
        out[name] = pick(values) if values else None
    reasons = [r.get("reason") for r in per_rank]
    distinct = list(dict.fromkeys(reason for reason in reasons if reason))
    if len(distinct) == 1 and all(reason == distinct[0] for reason in reasons):
        out["reason"] = distinct[0]
    else:
        out["reason"] = "; ".join(f"rank {i}: {reason}" for i, reason in enumerate(reasons) if reason) or None
    out["samples_per_rank"] = [r.get("samples", 0) for r in per_rank]
    out["per_rank"] = per_rank
    return out


class Sampler:
    """Calls `read` every `interval_s` on a daemon thread, from start() to stop(); readings taken
    before mark() (warm-up) are dropped. Without a mark (a run resumed past its warm-up) all count."""

    def __init__(self, read: Callable[[], Reading], interval_s: float = INTERVAL_S) -> None:
        self.read, self.interval_s = read, interval_s
        self.readings: list[Reading] = []
        self.failure: str | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="nvml-sampler", daemon=True)

    def start(self) -> Sampler:
        self._thread.start()
        return self

    def mark(self) -> None:
        """The timed window starts now: what was read so far was warm-up."""
        self.readings = []  # rebinding, not clearing: the thread appends to whichever list is current

    def stop(self) -> Summary:
        self._stop.set()
        self._thread.join(timeout=10 * self.interval_s + 5)  # a hung NVML call must not hang the trial's end
        return summarize(self.readings, self.failure)

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                self.readings.append(self.read())
            except Exception as exc:  # a GPU fallen off the bus must not take the training down with it
                self.failure = f"NVML reading failed: {type(exc).__name__}: {exc}"
                return
            self._stop.wait(self.interval_s)


_running: Sampler | None = None


@contextmanager
def sampling(device: torch.device) -> Iterator[list[Summary]]:
    """Sample this rank's GPU while the block runs; the yielded list holds the Summary after it."""
    global _running
    read, reason = open_reader(device)
    result: list[Summary] = []
    _running = Sampler(read).start() if read is not None else None
    try:
        yield result
    finally:
        sampler, _running = _running, None
        result.append(sampler.stop() if sampler is not None else unavailable(reason or "no reader"))


def timed_window_starts() -> None:
    """Warm-up is over: the readings from here on are the timed window's (no-op without a sampler)."""
    if _running is not None:
        _running.mark()


def open_reader(device: torch.device) -> tuple[Callable[[], Reading] | None, str | None]:
    """A function reading `device` through NVML, or (None, why not)."""
    if device.type != "cuda":
        return None, f"a {device.type} trial: NVML reads NVIDIA GPUs only"
    if torch.version.hip is not None:
        return None, "a ROCm GPU: NVML reads NVIDIA GPUs only"
    uuid = str(torch.cuda.get_device_properties(device).uuid)
    # CUDA_VISIBLE_DEVICES renumbers devices for torch but not for NVML; the UUID is the same to both.
    return reader_for(uuid if uuid.startswith(("GPU-", "MIG-")) else f"GPU-{uuid}")


def reader_for(uuid: str) -> tuple[Callable[[], Reading] | None, str | None]:
    """NVML's reader of the GPU with this UUID, or (None, why not): nvidia-ml-py missing, no driver."""
    try:
        import pynvml  # lazy: only GPU ranks read NVML, and a CPU install may lack nvidia-ml-py
    except ImportError:
        return None, NOT_INSTALLED
    try:
        pynvml.nvmlInit()
        handle = pynvml.nvmlDeviceGetHandleByUUID(uuid)
    except pynvml.NVMLError as exc:
        name = type(exc).__name__
        return (
            None,
            f"no NVIDIA driver (pynvml: {name})" if name in _NO_DRIVER else f"NVML unavailable (pynvml: {name}: {exc})",
        )

    def optional(query: Callable[[], Any]) -> Any:
        try:
            return query()
        except pynvml.NVMLError_NotSupported:
            return None

    def read() -> Reading:
        util = optional(lambda: pynvml.nvmlDeviceGetUtilizationRates(handle).gpu)
        power = optional(lambda: pynvml.nvmlDeviceGetPowerUsage(handle))  # milliwatts
        return Reading(
            gpu_util_pct=None if util is None else float(util),
            memory_used_bytes=int(pynvml.nvmlDeviceGetMemoryInfo(handle).used),
            power_w=None if power is None else power / 1e3,
        )

    return read, None
