"""The closed sets of values config fields take, each a `StrEnum` (OmegaConf supports Enum, not
Literal). Its members are `str`s: they compare equal to, and write to JSON as, their values.
OmegaConf looks members up by name, so every member's name is its value (Layout: launcher/layouts.py's
rows). launcher/config/schema.py types its fields with them."""

from __future__ import annotations

from enum import StrEnum

from launcher.layouts import LAYOUTS


def _choices(name: str, values: str) -> type[StrEnum]:
    """A StrEnum whose member names are its values (`1f1b` is no identifier: class syntax cannot)."""
    return StrEnum(name, [(v, v) for v in values.split()], module=__name__)  # type: ignore[return-value]


Arch = _choices("Arch", "gpt mlp llama")
Checkpointing = _choices("Checkpointing", "none selective op full")
Layout = _choices("Layout", " ".join(LAYOUTS))
Schedule = _choices("Schedule", "gpipe 1f1b interleaved_1f1b")
Backend = _choices("Backend", "auto gloo nccl")
OptimName = _choices("OptimName", "adamw sgd")
LrScaling = _choices("LrScaling", "none linear sqrt")
DataKind = _choices("DataKind", "synthetic file dataset")
TokenDtype = _choices("TokenDtype", "uint16 int32 int64")
ClusterKind = _choices("ClusterKind", "local slurm")
DeviceKind = _choices("DeviceKind", "auto cpu cuda")
# Interconnect presets; launcher/perf/links.py holds their bandwidth and latency.
Link = _choices("Link", "nvlink pcie ib400 ib200 eth100 eth10 nvlink3 nvlink4 nvlink5 ib_ndr ib_xdr roce400")
Launch = _choices("Launch", "srun torchrun")
ContainerRuntime = _choices("ContainerRuntime", "pyxis apptainer")
Search = _choices("Search", "grid adaptive")
PolicyName = _choices("PolicyName", "max_efficient min_cost fastest_within_budget")
POLICIES = tuple(p.value for p in PolicyName)
Precision = _choices("Precision", "auto fp32 bf16 fp16 fp8")
InputDtype = _choices("InputDtype", "float32 float64 float16 bfloat16 int64 int32 uint8 bool")
JobKind = _choices("JobKind", "builtin command")
JobLaunch = _choices("JobLaunch", "torchrun srun none")
Metrics = _choices("Metrics", "meter regex torchtitan megatron hf lightning")
