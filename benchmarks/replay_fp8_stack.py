"""What each published source's trainer did that the shape model prices (issue 32 item 1): which fp8 stack
cast its float8 linear layers, and whether its memory-bound ops ran fused (compiled, or fused kernels) or
each as its own kernel. The replay (benchmarks/replay_curve.py) prices every row's step with them
(launcher/compute/shape_rate.step_parts: `fp8_stack`, `compiled`) and fits fp8's matmul curve per stack.

fp8 stacks (launcher/compute/fp8_casts.FP8_CAST_BYTES says what each costs):
- `te`: NVIDIA Transformer Engine, delayed scaling, casts fused into the kernel that made the tensor;
- `torchao`: torchao's float8 training, tensorwise dynamic scaling: an amax and a cast per operand per call.
The launcher's own fp8 is torchao's (launcher/train/float8.py; launcher/perf/preset_fit.FP8_STACK).
"""

from __future__ import annotations

from benchmarks.replay_mapping import Unexpressible

FP8_STACK_OF_SOURCE = {
    "nemo_perf_2407": (
        "te",
        "NVIDIA/NeMo docs/source/performance/performance_summary.md @8e3d65dc: Megatron-Core via NeMo 24.07, "
        "whose FP8 is Transformer Engine's (the corpus notes: 'FP8 (Transformer Engine)'; NeMo's fp8 recipe "
        "is TE's DelayedScaling)",
    ),
    "nemo_long_seq_2505": (
        "te",
        "NVIDIA/NeMo docs/source/performance/performance_long_sequence.md @a2c4cc8e, 'LLAMA2-7B (FP8) - H100' "
        "(container NeMo24.03.01, Megatron-Core): Transformer Engine's FP8",
    ),
    "torchtitan_h100_2024": (
        "torchao",
        "pytorch/torchtitan docs/performance.md @d4c86e37, Table 1 technique 'Float8': torchtitan's float8 "
        "is torchao's Float8Linear, tensorwise dynamic scaling (the only recipe it had in Dec 2024; "
        "docs/float8.md)",
    ),
    "torchtitan_asynctp_2025": (
        "torchao",
        "pytorch/torchtitan benchmarks/asyncTP_llama3_h100_2025-06_torchtitan.md @2887250b, technique "
        "'float8 tensorwise' (torchao's; the rowwise rows, torchao's other recipe, are left out of the corpus)",
    ),
}
"""(stack, where the source says so) for every source with fp8 rows."""

EAGER_UNLESS_NAMED = {
    "torchtitan_h100_2024": "docs/performance.md @d4c86e37 Table 1 names 'torch.compile' in the technique of "
    "the runs that used it; the two 'FSDP' rows ran eager (at 8 and 128 GPUs, 14% below 'FSDP + torch.compile')",
    "torchtitan_asynctp_2025": "the benchmark's technique column names 'torch.compile' (every row does)",
    "pytorch_fsdp_blog_2024": "the follow-up blog 'Maximizing Training Throughput Using PyTorch FSDP and "
    "Torch.compile' (pytorch.org/blog/maximizing-training-throughput, IBM and Meta, 2024) starts from this one's "
    "57% MFU (7B, A100) as what FSDP and selective checkpointing did, then adds torch.compile (68%, 'between 10% "
    "and 23%' more), having first fixed the graph breaks of Meta's Llama code it 'initially started with': "
    "these rows ran eager",
}
"""Sources whose rows name torch.compile in their technique where it was used: a row that does not ran eager."""
FUSED_WHY = (
    "assumed fused: Megatron-LM and NeMo fuse their memory-bound ops by default (Transformer Engine's "
    "LayerNormLinear, bias-GeLU, bias-dropout-add and masked-softmax fusions); for the other sources "
    "(llm-foundry's MPT with low_precision_layernorm, Meta's, torchtitan's A100 table) the text says "
    "neither, and the fused count is taken"
)


def fp8_stack(row: dict) -> str | None:
    """The row's fp8 stack (`te`, `torchao`), None for a row that is not fp8; Unexpressible for an fp8
    row of a source FP8_STACK_OF_SOURCE does not name (a new source must say its stack, never be guessed)."""
    if str(row.get("precision")) != "fp8":
        return None
    if row["source"] not in FP8_STACK_OF_SOURCE:
        raise Unexpressible(
            f"fp8 stack of source {row['source']!r} not known: add it, with its citation, to "
            "benchmarks/replay_fp8_stack.py FP8_STACK_OF_SOURCE"
        )
    return FP8_STACK_OF_SOURCE[row["source"]][0]


def fused(row: dict) -> tuple[bool, str]:
    """(the row's memory-bound ops ran fused, why): eager only where the source's own text says the
    row did not compile (EAGER_UNLESS_NAMED), else the stated assumption FUSED_WHY."""
    if row["source"] in EAGER_UNLESS_NAMED:
        return "torch.compile" in str(row.get("notes", "")), EAGER_UNLESS_NAMED[row["source"]]
    return True, FUSED_WHY
