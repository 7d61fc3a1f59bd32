"""fp8's cast passes: the bytes each fp8 stack's casts of a float8 linear layer's operands move (pure: no torch).

compute/shape_rate.py prices them as memory-bound passes of the step (step_parts, `fp8_stack`).
"""

from __future__ import annotations

from collections.abc import Sequence

from launcher.compute.flops import Op

# torchao's tensorwise float8 linear layer, the launcher's (launcher/train/float8.py), as torchao 0.17.0
# (pytorch/ao @02105d46, the H200 runs' version) runs it under torch.compile, bf16 tensors in:
# - six casts per layer, each operand once per GEMM (float8/float8_linear.py matmul_with_hp_or_float8_args):
#   forward input (l. 56) and weight (l. 73); backward grad_output (l. 113) and weight (l. 131) for
#   grad_input, grad_output (l. 167) and input (l. 185) for grad_weight: all three GEMMs in fp8.
# - each cast is hp_tensor_to_float8_dynamic (float8/float8_scaling_utils.py): tensor_to_scale's amax,
#   max(abs(x)) over the whole tensor (float8_utils.tensor_to_amax), then the scaled cast. The cast needs
#   the amax's result, so inductor runs two kernels: the amax reads the tensor (2 B) and the cast reads it
#   again (2 B) and writes fp8 (1 B).
# - torch._scaled_mm takes row-major × column-major (float8/float8_ops.py preprocess_addmm l. 342-345:
#   `a_data.contiguous()`, `b_data.t().contiguous().t()`): grad_weight's grad_output.t() and input, and
#   grad_input's weight, need the other layout. The joint graph's CSE makes a tensor's second cast of
#   the same config the first one, and inductor writes both layouts from one read (the cast kernel's
#   transposed fp8 store: float8/_inductor_patch.py), so input and grad_output each cost an amax read
#   2 B + a cast reading 2 B and writing 1 B twice = 6 B; the weight, cast in forward and again
#   (transposed) in backward with the forward's scale, 2 + 3 + 3 = 8 B. torchao's own roofline counts
#   the same (torchao/testing/training/roofline_utils.py get_tensor_memory_traffic_ovhd_s, "tensorwise",
#   fuse_with_prev=False: input and grad_output [2, 0, 2 + 2·1], weight [2, 0, 2 + 1, 2 + 1]).
# - no pass after the GEMM: tensorwise scales go in as _scaled_mm's scale_a and scale_b (its epilogue,
#   float8_ops.addmm_float8_unwrapped), and its bf16 output is written as a bf16 GEMM's is.
# Eager runs the same casts as more kernels (abs, max, an fp32 upcast, clamp, the cast, each transpose a
# copy): not counted, the published torchao rows and the launcher's fp8 runs are compiled. A DDP run's
# fp32 master weights are read at 4 B in the weight's amax and casts (14 B): not counted, the layout is
# not known here.
TORCHAO_CAST_PASSES = {
    "input": ((2, 0), (2, 2)),
    "grad_output": ((2, 0), (2, 2)),
    "weight": ((2, 0), (2, 1), (2, 1)),
}
"""(bytes read, bytes written) per element of each kernel torchao's casts run on one operand of a float8
linear layer, forward and backward, compiled (the comment above cites each)."""
FP8_CAST_BYTES = {"torchao": sum(map(sum, TORCHAO_CAST_PASSES["input"])), "te": 0}
"""Bytes per element of a float8 linear layer's input and output gradient, per token, by fp8 stack.
torchao's tensorwise dynamic scaling computes each operand's scale from its own amax at every call,
passes of their own (TORCHAO_CAST_PASSES: 6). Transformer Engine's delayed scaling takes the scale
from earlier steps' amax history and writes the fp8 copy from the kernel that produced the tensor
(LayerNormLinear's norm, the activation; Micikevicius et al. 2022, arXiv:2209.05433 §4.3 and TE's
fp8_autocast docs): no pass of its own."""
FP8_WEIGHT_BYTES = {"torchao": sum(map(sum, TORCHAO_CAST_PASSES["weight"])), "te": 6}
"""Bytes per weight per micro-step for the same: torchao's amax and two casts of each weight
(TORCHAO_CAST_PASSES: 8); TE casts its weights once per micro-step too, amax, cast and its transpose
in one cast-transpose kernel."""
FP8_STACKS = tuple(FP8_CAST_BYTES)
"""The fp8 stacks the model knows: `torchao` (the launcher's own) and `te` (Transformer Engine)."""
# Under tensor parallel, torchtitan (torchtitan/parallelisms/parallelize_llama.py @9dec370, enable_float8)
# applies torchao's float8 TP styles (torchao/float8/float8_tensor_parallel.py @46b87964): the attention's
# and the feed-forward's inputs are cast once on their sequence shard (PrepareFloat8ModuleInput) and
# all-gathered in fp8 for all their column-parallel layers; a row-parallel layer's output gradient is cast
# on its shard (NoopFwToFloat8BwDynamic after the reduce-scatter) and all-gathered in fp8. The gathered
# fp8 tensor's other layout for the weight gradient is a copy (preprocess_addmm: read 1 B, write 1 B).
TP_GATHERED_CAST_BYTES = (2 + 2 + 1, 1 + 1)
"""(bytes per element of the shard's cast: amax 2 + cast 2 read, 1 written; bytes per gathered element of
the transposed copy) of an operand torchao's float8 TP styles all-gather in fp8 (comment above)."""
TP_GATHERED = {"wq": "attn", "wk": "attn", "wv": "attn", "qkv": "attn", "w1": "ffn", "w3": "ffn", "fc1": "ffn"}
"""Column-parallel layers whose input is one gathered fp8 tensor per group, cast once for the group."""
TP_GATHERED_GRAD = ("wo", "proj", "w2", "fc2")
"""Row-parallel layers whose output gradient is cast on its shard and gathered in fp8."""


def fp8_cast_bytes(linear: Sequence[Op], *, tp: int, tokens: int, stack: str) -> float:
    """Bytes per token of the whole model's work (tp's ranks each cast their split) that `stack`'s casts of the
    float8 linear layers `linear` move: inputs and output gradients once per forward-and-backward, each
    weight once per micro-step of `tokens`; under tensor parallel with torchao, the gathered operands as its
    float8 TP styles cast them (TP_GATHERED_CAST_BYTES)."""
    weights = sum(op.flops / 6.0 for op in linear)
    total = FP8_WEIGHT_BYTES[stack] * weights / tokens
    shard, copy = TP_GATHERED_CAST_BYTES
    gathers = tp > 1 and stack == "torchao"
    groups: dict[str, float] = {}
    for op in linear:
        runs = op.flops / (6.0 * op.n * op.k)  # tp × the layer's count × its runs ÷ 3, as one op's elements
        k, n = op.k * runs, op.n * runs
        if gathers and op.name in TP_GATHERED:  # the group's layers share one input: counted once
            groups[TP_GATHERED[op.name]], k = (shard + copy * tp) * k / tp, 0.0
        if gathers and op.name in TP_GATHERED_GRAD:
            total, n = total + (shard + copy * tp) * n / tp, 0.0
        total += FP8_CAST_BYTES[stack] * (k + n)
    return total + sum(groups.values())
