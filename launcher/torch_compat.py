"""The torch releases the launcher runs on, and what differs between them.

FLOOR is the oldest torch the suite proves (pyproject's `torch>=`, recorded by
benchmarks/torch_compat.py in benchmarks/results/torch_compat.json, checked by
tests/unit/test_torch_floor.py). Each difference between the floor and the newest torch tested is
one named release below, read where the payload works around it (launcher/train/engines/) or where
config validation refuses a layout that needs a newer torch (launcher/config/validate_layout.py);
nothing else in the package compares torch versions.

Standard library only at import (torch's version is read from its metadata, or from the imported
module when the caller has torch already): the payload uses it on compute nodes with the site's
torch, and the control plane asks it without paying torch's import.
"""

from __future__ import annotations

import importlib
import re
import sys
from typing import Any

FLOOR = (2, 9)
"""The oldest torch (major, minor) the launcher supports: pyproject's floor, proved by the record."""


def parse_version(text: str) -> tuple[int, int, int]:
    """(major, minor, micro) of a torch version string: "2.9.1+cu128" → (2, 9, 1), "2.14.0a0+git1234" → (2, 14, 0)."""
    found = re.match(r"(\d+)\.(\d+)(?:\.(\d+))?", text)
    if found is None:
        raise ValueError(f"torch version {text!r} is not of the form major.minor[.micro]")
    major, minor, micro = found.groups()
    return int(major), int(minor), int(micro or 0)


def torch_version() -> tuple[int, int, int] | None:
    """The installed torch's (major, minor, micro); None when torch is not installed here."""
    module = sys.modules.get("torch")
    text = getattr(module, "__version__", None)
    if text is None:
        # lazy: importlib.metadata (and the email package under it, ~10 ms) only where torch's version is
        # asked without torch imported, never in a sweep's start-up (issue 30 item 11)
        from importlib import metadata

        try:
            text = metadata.version("torch")
        except metadata.PackageNotFoundError:
            return None
    return parse_version(str(text))


def older_than(major: int, minor: int, version: tuple[int, int, int] | None = None) -> bool:
    """Whether `version` (default: the installed torch) is a release before major.minor. No torch: False
    (nothing to work around; the import that needs torch fails on its own)."""
    version = torch_version() if version is None else version
    return version is not None and version[:2] < (major, minor)


PIPELINE_INIT_INT64_SEND = (2, 10)
"""Before torch 2.10, a pipeline stage's first exchange with its neighbours (PipelineStage's
`_get_init_p2p_neighbors_ops`) sends an int64 scalar (8 bytes) that the neighbour receives into
a float32 tensor (4 bytes): gloo aborts every rank ("op.preamble.length <= op.nbytes. 8 vs 4").
torch 2.10 sends float32. The pipeline stage (engines/pipeline.py `_Stage`) sends float32 on older torch."""


def pipeline_init_sends_int64(version: tuple[int, int, int] | None = None) -> bool:
    """Whether this torch's pipeline stages send the int64 start-up scalar (PIPELINE_INIT_INT64_SEND)."""
    return older_than(*PIPELINE_INIT_INT64_SEND, version)


PIPELINE_RETURN_OUTPUTS = (2, 10)
"""`schedule.step(..., return_outputs=False)` (skip merging the last stage's outputs, which the
engines never read) is torch 2.10's; torch 2.9's step() passes the keyword on to the model."""


def schedule_step_options(version: tuple[int, int, int] | None = None) -> dict[str, bool]:
    """Keywords for a pipeline schedule's step() beyond the model's: return_outputs=False where torch has it."""
    return {} if older_than(*PIPELINE_RETURN_OUTPUTS, version) else {"return_outputs": False}


PIPELINE_INPUT_STRIDES = (2, 12)
"""Before torch 2.12 a first pipeline stage checks every microbatch's strides against the contiguous
ones its shape inference recorded (PipelineStage._validate_fwd_input), so the inputs as a view of the
batch (`batch[:, :-1]`, strides (seq + 1, 1)) fail: "stride mismatch: expected (64, 1) actual (65, 1)".
engines/pipeline.py hands such torch contiguous inputs."""


def pipeline_checks_input_strides(version: tuple[int, int, int] | None = None) -> bool:
    """Whether this torch's first pipeline stage refuses non-contiguous inputs (PIPELINE_INPUT_STRIDES)."""
    return older_than(*PIPELINE_INPUT_STRIDES, version)


FSDP_MODULE_DICT = (2, 11)
"""fully_shard of an nn.ModuleDict (or ModuleList) subclass, even one with a forward, is refused
before torch 2.11 ("fully_shard does not support containers that do not implement forward"); the
routed experts (models/moe.py `Experts`) are one. On older torch engines/ep.py shards the experts'
modules as one group instead (fully_shard of a list of modules: one unit, the same parameters)."""


def fsdp_takes_module_dict(version: tuple[int, int, int] | None = None) -> bool:
    """Whether this torch's fully_shard accepts a ModuleDict subclass with a forward (FSDP_MODULE_DICT)."""
    return not older_than(*FSDP_MODULE_DICT, version)


SINGLE_TENSOR_COLLECTIVES = (2, 13)
"""torch 2.13 names the one-tensor all-gather and reduce-scatter `all_gather_single` and
`reduce_scatter_single` and deprecates (FutureWarning) the older `all_gather_into_tensor` and
`reduce_scatter_tensor`, the only names before it."""


def all_gather_single(output, input, group=None) -> None:
    """torch.distributed's all-gather of one tensor per rank into `output`, under this torch's name for it."""
    import torch.distributed as dist  # lazy: the module's import stays standard library only (as below)

    old = older_than(*SINGLE_TENSOR_COLLECTIVES)
    (dist.all_gather_into_tensor if old else dist.all_gather_single)(output, input, group=group)


def reduce_scatter_single(output, input, group=None) -> None:
    """torch.distributed's sum-reduce-scatter of `input` into each rank's `output`, under this torch's name for it."""
    import torch.distributed as dist  # lazy: as above

    old = older_than(*SINGLE_TENSOR_COLLECTIVES)
    (dist.reduce_scatter_tensor if old else dist.reduce_scatter_single)(output, input, group=group)


MESH_UNFLATTEN = (2, 10)
"""DeviceMesh._unflatten (one mesh dim split into several, its groups made once) is torch 2.10's.
Before it engines/base.py builds HSDP's (replicate, shard) mesh as a second mesh over the world."""


def mesh_unflattens(version: tuple[int, int, int] | None = None) -> bool:
    """Whether this torch's DeviceMesh has _unflatten (MESH_UNFLATTEN)."""
    return not older_than(*MESH_UNFLATTEN, version)


RING_ATTENTION_MOVED = (2, 10)
"""torch 2.10 moved its ring attention (context parallel) from the private module
torch.distributed.tensor.experimental._attention to ..._context_parallel._attention and renamed its
table of DTensor op handlers from `customized_ops` to `custom_ops`; the functions
engines/context_parallel.py calls (_templated_ring_attention and its backward) kept their signatures."""


def ring_attention(version: tuple[int, int, int] | None = None) -> tuple[Any, dict]:
    """(torch's private ring-attention module, its table of DTensor op handlers) on this torch."""
    if older_than(*RING_ATTENTION_MOVED, version):
        module = importlib.import_module("torch.distributed.tensor.experimental._attention")
        return module, module.customized_ops
    module = importlib.import_module("torch.distributed.tensor.experimental._context_parallel._attention")
    return module, module.custom_ops


FSDP_TP_CP = (2, 10)
"""Before torch 2.10 DeviceMesh cannot slice a flattened dim whose parts are not adjacent: FSDP of
tensor-parallel weights over "dp_cp" (dp and cp flattened, pp between them) fails ("only allows
slicing out a contiguous flattened dim"). The layouts with both tp and cp (fsdp_tp_cp,
fsdp_tp_pp_cp) are refused on such torch; fsdp_cp and fsdp_tp run."""


def tp_cp_refusal(layout: str, version: tuple[int, int, int] | None = None) -> str | None:
    """The one line refusing `layout` (one that splits both tp and cp under FSDP) on a torch before
    FSDP_TP_CP; None where this torch runs it."""
    version = torch_version() if version is None else version
    if not older_than(*FSDP_TP_CP, version):
        return None
    need = "{}.{}".format(*FSDP_TP_CP)
    have = ".".join(map(str, version))
    return (
        f"parallel.layout={layout} needs torch >= {need} (FSDP over dp × cp of tensor-parallel weights), "
        f"this torch is {have}: upgrade torch, or split one of them (parallel=fsdp_cp or parallel=fsdp_tp)"
    )
