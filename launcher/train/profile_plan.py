"""What `launcher profile` measures on a node, and the site profile file's shape: stdlib only, so the
control plane (launcher/run/profile.py, the bar's length) and the node (profile_node.py) read one plan.

The file (docs/profile.md), schema version 2:

    {"schema": "launcher.site_profile", "version": 2,
     "device": {"name": "NVIDIA H200", "type": "cuda", "threads_per_rank": 1},
     "ranks": 16, "nodes": 2, "ranks_per_node": 8, "hosts": [...],
     "matmul": {"bf16": [{"m": 4096, "n": 4096, "k": 4096, "tflops": 712.3}, ...], "fp8": [...]},
     "attention": {"bf16": [{"seq": 2048, "head_dim": 128, "tflops": 410.0}, ...]},
     "mem_bw_gbs": 4100.0, "op_us": 6.2, "overlap": {"intra": 0.97, "inter": 0.99},
     "scopes": {"intra": {"ranks": 8}, "inter": {"ranks": 2}},
     "collectives": {"all_reduce": {"intra": [{"bytes": 65536, "busbw_gbs": 1.2, "latency_us": 30.1}, ...],
                                    "inter": [...]}, "all_gather": {...}, ...},
     "skipped": ["fp8: ...", "inter: ..."], "torch": "2.9.0", "measured_at": "2026-11-28T20:00:00Z"}

An attention point's `tflops` is the causal kernel's forward and backward at the counted FLOPs (12·T²·Q
per head, the whole square, as model FLOPs count it) over its time, so causal skipping is in the rate.
`op_us` is the host's time per dispatched op (views included) of a training step on tensors too small
for their arithmetic to count. `bytes` is nccl-tests' "size" column: the all-reduce's buffer, the
all-gather's output (n × a rank's part), the reduce-scatter's input, the all-to-all's per-rank
buffer; `latency_us` the median time of one operation of that size; busbw as nccl-tests defines it
(`busbw_factor`). Scope `intra`: the ranks of the first node; `inter`: one rank per node (the first
of each), so the figure is one rank's path across the network, as a data-parallel ring between nodes
sees it. `overlap` per scope: the share of an all-reduce of OVERLAP_BYTES over that scope's ranks that every rank
computing at once hides (as DDP's backward does its buckets'): (t_comm + t_compute − t_both) ÷ t_comm, the
compute lasting longer than the all-reduce, in [−1, 1] (negative: both at once cost more than in turn).
"""

from __future__ import annotations

SCHEMA = "launcher.site_profile"
SCHEMA_VERSION = 3
READABLE_VERSIONS = (1, 2, 3)
"""Version 2 adds `op_us`, 3 `overlap`; a version 1 file is read with no per-op cost, a version 1 or 2 with the
overlap model's assumption that compute leaves a collective's speed alone (site_profile.py)."""
OPS = ("all_reduce", "all_gather", "reduce_scatter", "all_to_all")
SCOPES = ("intra", "inter")
PROFILE_FILE = "profile.json"
"""Where the node's rank 0 writes the profile, in the trial folder."""

# Shapes (m, n, k): squares across the range a model's widths span, and the tall/wide ones of an MLP
# block (k or n 4× the width); CPU ranks get a grid a few seconds long.
_CPU_SHAPES = (
    (128, 128, 128),
    (256, 256, 256),
    (512, 512, 512),
    (1024, 1024, 1024),
    (512, 2048, 512),
    (512, 512, 2048),
)
# A GPU's at a training step's shapes: m a micro-batch's tokens (_GPU_ROWS), n and k the widths of the bundled
# recipes (768-8192) and an MLP block's 4x sides. A GPU GEMM's rate also falls with an output too small to fill
# the SMs (compute/gemm_shape.py: at mn_half 500,000 a 1024-square's output share is 0.70 of a 16384 x 1024
# one's), so squares would understate the rate a step's tall GEMMs of the same smallest side run at.
_GPU_ROWS = 16384
_GPU_SHAPES = (
    *((_GPU_ROWS, d, d) for d in (768, 1024, 2048, 4096, 8192)),
    *((_GPU_ROWS, 4 * d, d) for d in (2048, 4096)),
    *((_GPU_ROWS, d, 4 * d) for d in (2048, 4096)),
)
# Attention (sequence, head dim): the fused causal kernel's forward and backward, b·h rows of it.
_CPU_ATTENTION = ((64, 32), (256, 64), (1024, 64))
_GPU_ATTENTION = ((1024, 64), (2048, 128), (8192, 128))
ATTENTION_TOKENS = {"cpu": 16384, "cuda": 2**20}
"""Batch × heads × sequence of each attention shape timed (b·h = this ÷ sequence)."""
_CPU_DTYPES = ("fp32", "bf16")
_GPU_DTYPES = ("bf16", "fp8")
# Message sizes, ×4 apart: a CPU bed's link may be 25 MB/s, so its grid stops at 4 MiB.
_CPU_BYTES = tuple(4**i * 4096 for i in range(6))  # 4 KiB .. 4 MiB
_GPU_BYTES = tuple(4**i * 65536 for i in range(8))  # 64 KiB .. 1 GiB
OVERLAP_BYTES = {"cpu": 2**20, "cuda": 64 * 2**20}
"""The all-reduce timed under compute for `overlap`: a DDP bucket's order (a CPU bed's 1 MiB first bucket, whose
link may carry 25 MB/s; a GPU's 25 MiB buckets)."""
COLD_BYTES = {"cpu": 64 * 2**20, "cuda": 2**30}
"""Operands a matmul or attention shape cycles through while timed, far larger than any cache: a step's ops
read activations fresh from memory, not the last run's operands from L2 (the bed's 128³ fp32 matmul read
48 GFLOP/s re-running one pair, 40 cycling through 64 MiB; 512³ 52 and 50)."""
MEM_BYTES = {"cpu": 64 * 2**20, "cuda": 2**30}
"""Bytes of the tensor copied for the memory bandwidth: far larger than any cache."""


def matmul_shapes(device_type: str) -> tuple[tuple[int, int, int], ...]:
    return _GPU_SHAPES if device_type == "cuda" else _CPU_SHAPES


def attention_shapes(device_type: str) -> tuple[tuple[int, int], ...]:
    return _GPU_ATTENTION if device_type == "cuda" else _CPU_ATTENTION


def dtypes(device_type: str) -> tuple[str, ...]:
    """The dtypes tried: fp8 where the GPU has it (skipped with a reason elsewhere)."""
    return _GPU_DTYPES if device_type == "cuda" else _CPU_DTYPES


def message_bytes(device_type: str) -> tuple[int, ...]:
    return _GPU_BYTES if device_type == "cuda" else _CPU_BYTES


def busbw_factor(op: str, n: int) -> float:
    """nccl-tests' busbw ÷ algbw (doc/PERFORMANCE.md): 2(n−1)/n for all-reduce, (n−1)/n for all-gather,
    reduce-scatter and all-to-all, so busbw compares with the link's rate whatever the rank count."""
    if op not in OPS:
        raise ValueError(f"unknown collective {op!r}; one of {', '.join(OPS)}")
    if n < 2:
        raise ValueError(f"a bus bandwidth needs ≥ 2 ranks, got {n}")
    return (2.0 if op == "all_reduce" else 1.0) * (n - 1) / n


def steps(device_type: str) -> int:
    """Measurements in a profile (each a `step i/N` line): matmuls, attention (its dtypes but fp8), one
    copy, the per-op cost, every op × scope × size, the overlap per scope."""
    grid = len(dtypes(device_type)) * len(matmul_shapes(device_type))
    attention = len([d for d in dtypes(device_type) if d != "fp8"]) * len(attention_shapes(device_type))
    return grid + attention + 2 + len(OPS) * len(SCOPES) * len(message_bytes(device_type)) + len(SCOPES)
