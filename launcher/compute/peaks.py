"""Dense peak FLOP/s per device and math precision, the denominator of MFU (pure: no torch).

Every figure is the vendor's dense (no 2:4 structured sparsity) tensor-core peak; where a
datasheet prints only the sparse figure (marked "with sparsity"), the dense one is half of it.
`bf16` covers fp16 too (the same tensor-core rate on every device here); `tf32` is what fp32
matmuls run at on CUDA with TF32 enabled (the payload enables it for fp32 runs); `fp32` is the
plain (non-tensor) rate; `fp8` the dense fp8 (e4m3) tensor-core rate, None on a device without
fp8 tensor cores (A100): precision=fp8 runs its linear layers' matmuls there and the rest at bf16
(compute/fp8.py blends the two). An unknown device has no peak: MFU is then null, never a guess.

A device is picked by its name as `torch.cuda.get_device_name()` reports it ("NVIDIA
A100-SXM4-80GB", "NVIDIA H100 80GB HBM3", "AMD Instinct MI300X") or as a recipe writes it
(`cluster.device_name`), case-insensitively; the first row whose pattern matches wins, so
variants (PCIe, NVL) come before the plain name.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, replace

MATH_DTYPES = ("bf16", "tf32", "fp32")
"""The math precisions a row gives a peak for."""
MISMATCH_RATIO = 2.0
"""An explicit peak more than this factor from the table's peak for the precision used is flagged."""
SAME_PEAK = 0.05
"""Within this relative distance an explicit peak "is" a table figure (9.89e14 is H100's bf16 989.4 TF)."""


@dataclass(frozen=True)
class DevicePeak:
    device: str
    """The row's name, as the report prints it."""
    pattern: str
    """Regex searched (case-insensitive) in a device name."""
    bf16: float
    """Dense bf16/fp16 tensor-core FLOP/s."""
    tf32: float
    """Dense tf32 tensor-core FLOP/s (fp32 matmuls with TF32 enabled)."""
    fp32: float
    """Plain fp32 FLOP/s (no tensor cores)."""
    source: str
    """The vendor document the figures come from."""
    memory_gb: float | None = None
    """Memory of one device as its datasheet states it (HBM/GDDR capacity, binary gigabytes:
    an "80GB" H100 holds 80 GiB of HBM3, of which the driver leaves a few hundred MiB unused),
    the default of `cluster.device_memory_gb`; None where the row spans parts of several sizes."""
    memory_source: str = ""
    """The document `memory_gb` comes from."""
    fp8: float | None = None
    """Dense fp8 tensor-core FLOP/s, from `source`; None: the device has no fp8 tensor cores."""
    hbm_gbs: float | None = None
    """Peak memory bandwidth of one device, GB/s (10⁹ bytes/s) as its datasheet states it: what
    memory-bound operations (norms, activations, optimizer step, fp8 casts) run against
    (compute/shape_rate.py); None where no datasheet figure is recorded."""
    hbm_source: str = ""
    """The document `hbm_gbs` comes from."""

    def flops(self, math_dtype: str) -> float | None:
        return {"bf16": self.bf16, "fp16": self.bf16, "tf32": self.tf32, "fp32": self.fp32, "fp8": self.fp8}[math_dtype]


_NV_A100 = "NVIDIA A100 Tensor Core GPU Datasheet, https://www.nvidia.com/en-us/data-center/a100/ (dense figures)"
_NV_H100 = (
    "NVIDIA H100 Tensor Core GPU Datasheet, https://www.nvidia.com/en-us/data-center/h100/ (sparse figures halved)"
)
_NV_H200 = (
    "NVIDIA H200 Tensor Core GPU Datasheet, https://www.nvidia.com/en-us/data-center/h200/ (sparse figures halved)"
)
_NV_HGX = "NVIDIA HGX Platform specifications, https://www.nvidia.com/en-us/data-center/hgx/"
_NV_GB200 = "NVIDIA GB200 NVL72 specifications, https://www.nvidia.com/en-us/data-center/gb200-nvl72/"
_NV_A100_MEM = "NVIDIA A100 Tensor Core GPU Datasheet (40 GB HBM2 or 80 GB HBM2e by part)"
_NV_H100_MEM = "NVIDIA H100 Tensor Core GPU Datasheet (SXM and PCIe 80 GB, NVL 94 GB)"
_NV_H200_MEM = "NVIDIA H200 Tensor Core GPU Datasheet (141 GB HBM3e, SXM and NVL)"
_NV_A100_BW = "NVIDIA A100 Tensor Core GPU Datasheet (80 GB SXM 2,039 GB/s, 80 GB PCIe 1,935 GB/s, 40 GB 1,555 GB/s)"
_NV_H100_BW = "NVIDIA H100 Tensor Core GPU Datasheet (SXM 3.35 TB/s, PCIe 2 TB/s, NVL 3.9 TB/s)"
_NV_H200_BW = "NVIDIA H200 Tensor Core GPU Datasheet (4.8 TB/s, SXM and NVL)"

PEAKS: tuple[DevicePeak, ...] = (
    # A100 SXM4 and PCIe share their tensor-core peaks (40 GB and 80 GB alike), so a bare "A100" is no guess.
    # Their memory is 40 or 80 GB by part: `device_memory_gb` reads the name ("A100-SXM4-40GB"), 80 otherwise.
    DevicePeak(
        device="A100 SXM4",
        pattern=r"A100.*SXM",
        bf16=312e12,
        tf32=156e12,
        fp32=19.5e12,
        source=_NV_A100,
        memory_gb=80,
        memory_source=_NV_A100_MEM,
        hbm_gbs=2039,
        hbm_source=_NV_A100_BW,
    ),
    DevicePeak(
        device="A100 PCIe",
        pattern=r"A100.*PCIE",
        bf16=312e12,
        tf32=156e12,
        fp32=19.5e12,
        source=_NV_A100,
        memory_gb=80,
        memory_source=_NV_A100_MEM,
        hbm_gbs=1935,
        hbm_source=_NV_A100_BW,
    ),
    DevicePeak(
        device="A100",
        pattern=r"(?<![A-Z0-9])A100",
        bf16=312e12,
        tf32=156e12,
        fp32=19.5e12,
        source=_NV_A100,
        memory_gb=80,
        memory_source=_NV_A100_MEM,
        hbm_gbs=2039,
        hbm_source=_NV_A100_BW,
    ),
    DevicePeak(
        device="H100 PCIe",
        pattern=r"H100.*PCIE",
        bf16=756e12,
        tf32=378e12,
        fp32=51.2e12,
        source=_NV_H100,
        memory_gb=80,
        memory_source=_NV_H100_MEM,
        fp8=1513e12,
        hbm_gbs=2000,
        hbm_source=_NV_H100_BW,
    ),
    DevicePeak(
        device="H100 NVL",
        pattern=r"H100.*NVL",
        bf16=835.5e12,
        tf32=417.5e12,
        fp32=60e12,
        source=_NV_H100,
        memory_gb=94,
        memory_source=_NV_H100_MEM,
        fp8=1670.5e12,
        hbm_gbs=3900,
        hbm_source=_NV_H100_BW,
    ),
    # torch reports the SXM5 part as "NVIDIA H100 80GB HBM3"; a bare "H100" could be a PCIe card: unknown.
    DevicePeak(
        device="H100 SXM5",
        pattern=r"(?<![A-Z0-9])H100.*(SXM|HBM3)",
        bf16=989.4e12,
        tf32=494.7e12,
        fp32=66.9e12,
        source="NVIDIA H100 Tensor Core GPU Architecture whitepaper (H100 SXM5 column); fp8: " + _NV_H100,
        memory_gb=80,
        memory_source=_NV_H100_MEM,
        fp8=1979e12,
        hbm_gbs=3350,
        hbm_source=_NV_H100_BW,
    ),
    DevicePeak(
        device="H200 NVL",
        pattern=r"H200.*NVL",
        bf16=835.5e12,
        tf32=417.5e12,
        fp32=60e12,
        source=_NV_H200,
        memory_gb=141,
        memory_source=_NV_H200_MEM,
        fp8=1670.5e12,
        hbm_gbs=4800,
        hbm_source=_NV_H200_BW,
    ),
    # H200 ships as SXM or NVL only; torch reports the SXM part as "NVIDIA H200".
    DevicePeak(
        device="H200 SXM",
        pattern=r"(?<![A-Z0-9])H200",
        bf16=989.5e12,
        tf32=494.5e12,
        fp32=67e12,
        source=_NV_H200,
        memory_gb=141,
        memory_source=_NV_H200_MEM,
        fp8=1979e12,
        hbm_gbs=4800,
        hbm_source=_NV_H200_BW,
    ),
    # HGX B200 (1,000 W). A GB200 superchip's B200 runs at 1,200 W with higher peaks: not matched ("GB200").
    DevicePeak(
        device="B200 (HGX)",
        pattern=r"(?<![A-Z0-9])B200",
        bf16=2.25e15,
        tf32=1.1e15,
        fp32=75e12,
        source=f"HGX B200 column of {_NV_HGX} (8 GPUs' sparse figures ÷ 8, halved)",
        memory_gb=180,
        memory_source="NVIDIA HGX B200 specifications (1,440 GB of HBM3e over 8 GPUs)",
        fp8=4.5e15,
        hbm_gbs=8000,
        hbm_source="HGX B200 column of " + _NV_HGX + " (64 TB/s HBM3e over 8 GPUs)",
    ),
    # The GB200 superchip's B200 (1,200 W): NVL72's rack figures ÷ 72. torch reports it as "NVIDIA GB200".
    DevicePeak(
        device="GB200",
        pattern=r"GB200",
        bf16=2.5e15,
        tf32=1.25e15,
        fp32=80e12,
        source=f"{_NV_GB200} (72 GPUs' sparse figures ÷ 72, halved; FP32 5,760 TF ÷ 72)",
        memory_gb=186,
        memory_source=f"{_NV_GB200} (up to 13.4 TB HBM3e over 72 GPUs)",
        fp8=5e15,
        hbm_gbs=8000,
        hbm_source=_NV_GB200 + " (576 TB/s HBM3e over 72 GPUs)",
    ),
    # HGX B300 (Blackwell Ultra, 1,100 W); the GB300 superchip's part is not matched ("GB300").
    DevicePeak(
        device="B300 (HGX)",
        pattern=r"(?<![A-Z0-9])B300",
        bf16=2.25e15,
        tf32=1.125e15,
        fp32=75e12,
        source=f"HGX B300 column of {_NV_HGX} (8 GPUs' sparse figures ÷ 8, halved)",
        memory_gb=288,
        memory_source=f"HGX B300 column of {_NV_HGX} (up to 2.3 TB HBM3e over 8 GPUs)",
        fp8=4.5e15,
    ),
    DevicePeak(
        device="L40S",
        pattern=r"L40S",
        bf16=362.05e12,
        tf32=183e12,
        fp32=91.6e12,
        source="NVIDIA L40S GPU Datasheet, https://www.nvidia.com/en-us/data-center/l40s/ (fp8: sparse halved)",
        memory_gb=48,
        memory_source="NVIDIA L40S GPU Datasheet (48 GB GDDR6 with ECC)",
        fp8=733e12,
        hbm_gbs=864,
        hbm_source="NVIDIA L40S GPU Datasheet (864 GB/s GDDR6)",
    ),
    DevicePeak(
        device="MI300X",
        pattern=r"MI300X",
        bf16=1307.4e12,
        tf32=653.7e12,
        fp32=163.4e12,
        source="AMD Instinct MI300X Accelerator Data Sheet, "
        "https://www.amd.com/en/products/accelerators/instinct/mi300/mi300x.html (dense figures)",
        memory_gb=192,
        memory_source="AMD Instinct MI300X Accelerator Data Sheet (192 GB HBM3)",
        fp8=2614.9e12,
        hbm_gbs=5300,
        hbm_source="AMD Instinct MI300X Accelerator Data Sheet (5.3 TB/s peak HBM3 bandwidth)",
    ),
)


@dataclass(frozen=True)
class PeakChoice:
    """The peak MFU is computed against, and where it came from."""

    flops: float | None
    """FLOP/s of one device; None: unknown, MFU null."""
    source: str | None
    """`cluster.peak_flops_per_device`, or the table row and its document; None when unknown."""
    device: str | None
    """The table row the device name matched (None: no row)."""
    mismatch: str | None
    """One line when an explicit peak does not fit the precision used on a known device, or when
    the device torch detected is not the one `cluster.device_name` names ("; "-joined when both)."""
    fits_device: bool = True
    """`flops` is the matched row's own figure for the precision (the table's, or an explicit peak
    within 5% of it); False when a row matched but an explicit peak is some other figure."""


def find_device(name: str | None) -> DevicePeak | None:
    """The first row whose pattern is found in `name` (case-insensitive); None for no match."""
    if not name:
        return None
    upper = name.upper()
    return next((row for row in PEAKS if re.search(row.pattern, upper)), None)


def device_memory_gb(name: str | None) -> float | None:
    """Memory of one device named `name` from the table (GiB, as cluster.device_memory_gb reads it); None for
    a device it does not know. A name that says 40GB (torch: "NVIDIA A100-SXM4-40GB") is the smaller A100."""
    row = find_device(name)
    if row is None or row.memory_gb is None:
        return None
    return 40.0 if a100_40gb(row.device, name) else float(row.memory_gb)


def a100_40gb(device: str, name: str | None) -> bool:
    """`device` (a table row) is the A100 and `name` its 40 GB part: its memory and bandwidth are the smaller."""
    return device.startswith("A100") and re.search(r"40\s*GB", (name or "").upper()) is not None


def math_dtype(precision: str, *, tf32: bool) -> str:
    """The precision matmuls run at: bf16/fp16 autocast (fp8: its linear layers, compute/fp8.py), else
    tf32 where TF32 is enabled, else fp32."""
    if precision in ("bf16", "fp16", "fp8"):
        return precision
    return "tf32" if tf32 else "fp32"


def resolve_precision(requested: str, device_type: str) -> str:
    """`auto`: bf16 on CUDA; fp32 on CPU (bf16 there has no native support and runs ~10× slower)."""
    if requested != "auto":
        return requested
    return "bf16" if device_type == "cuda" else "fp32"


def choose_peak(
    *, device_name: str | None, dtype: str, explicit: float | None, detected: str | None = None
) -> PeakChoice:
    """The peak of the device that ran. `detected` (what torch reports) wins when `device_name`
    (the recipe's) names a device of other peaks: the recipe then no longer speaks for the device,
    its explicit peak included, and the mismatch is flagged. Else an explicit peak (flagged when
    it does not fit `dtype` on a known device); else the table's peak for the device and `dtype`;
    else unknown."""
    named, found = find_device(device_name), find_device(detected)
    if named is not None and detected and not (found is not None and _same_peaks(named, found)):
        note = device_mismatch(device_name, detected, named=named, found=found, dtype=dtype, explicit=explicit)
        if found is not None:
            return replace(_table_peak(found, dtype), mismatch=note)
        choice = choose_peak(device_name=device_name, dtype=dtype, explicit=explicit)
        return replace(choice, mismatch="; ".join(n for n in (note, choice.mismatch) if n))
    row = found or named
    if explicit:
        return PeakChoice(
            flops=explicit,
            source="cluster.peak_flops_per_device",
            device=row.device if row is not None else None,
            mismatch=mismatch(row, dtype, explicit) if row is not None else None,
            fits_device=row is None or _close(row.flops(dtype) or 0.0, explicit),
        )
    if row is None:
        return PeakChoice(flops=None, source=None, device=None, mismatch=None)
    return _table_peak(row, dtype)


def _table_peak(row: DevicePeak, dtype: str) -> PeakChoice:
    return PeakChoice(
        flops=row.flops(dtype), source=f"{row.device} dense {dtype}: {row.source}", device=row.device, mismatch=None
    )


def _same_peaks(a: DevicePeak, b: DevicePeak) -> bool:
    """Rows of one device (A100 and A100 SXM4): naming either gives the same MFU."""
    return all(a.flops(d) == b.flops(d) for d in MATH_DTYPES)


def device_mismatch(
    configured: str | None,
    detected: str,
    *,
    named: DevicePeak,
    found: DevicePeak | None,
    dtype: str,
    explicit: float | None,
) -> str:
    """One line: the recipe's device is not the one that ran, and which peak MFU used."""
    said = f"cluster.device_name={configured!r} but torch detected {detected!r}"
    if found is None:
        used = f"cluster.peak_flops_per_device={explicit:.3g}" if explicit else f"the {named.device} {dtype} peak"
        return f"device mismatch: {said}, which the peak table does not know: MFU uses {used} as configured"
    instead = f", not cluster.peak_flops_per_device={explicit:.3g}" if explicit else ""
    return (
        f"device mismatch: {said}: MFU uses the {found.device} dense {dtype} peak "
        f"{found.flops(dtype):.3g}{instead}; set cluster.device_name to the device that runs"
    )


def mismatch(row: DevicePeak, dtype: str, explicit: float) -> str | None:
    """Why an explicit peak does not fit `dtype` on `row`'s device, or None when it does. It does
    not fit when it is more than 2× off the table's figure, or when it is (within 5%) the figure of
    another precision that differs from this one's: 9.89e14 on an H100 running fp32 (TF32,
    494.7 TF) is the bf16 peak, so MFU would read half of what it is."""
    expected = row.flops(dtype)
    if expected is None:  # fp8 on a device without fp8 tensor cores: no figure of its own to compare with
        said = f"cluster.peak_flops_per_device={explicit:.3g}"
        return f"peak/precision mismatch: {row.device} has no {dtype} peak, so {said} is unchecked"
    ratio = explicit / expected
    other = next(
        (d for d in MATH_DTYPES if not _close(row.flops(d), expected) and _close(row.flops(d), explicit)), None
    )
    if other is None and 1 / MISMATCH_RATIO <= ratio <= MISMATCH_RATIO:
        return None
    looks = f" (the {row.device} {other} peak)" if other else ""
    return (
        f"peak/precision mismatch: cluster.peak_flops_per_device={explicit:.3g}{looks} but the trials' "
        f"matmuls ran in {dtype} on {row.device}, whose dense {dtype} peak is {expected:.3g}: the MFU shown is "
        f"{1 / ratio:.2g}× the MFU against that peak"
    )


def _close(a: float, b: float) -> bool:
    return math.isclose(a, b, rel_tol=SAME_PEAK)
