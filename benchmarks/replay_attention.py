"""Which attention kernel each published source's trainer ran, as the shape model prices it (issue 32 item 1;
launcher/compute/shape_rate.ATTENTION_KERNELS and KERNEL_SHARE): Transformer Engine's DotProductAttention,
cuDNN's fused attention on Hopper, where the source trains with Megatron-Core, NeMo or NeMo AutoModel's TE
backend; torch SDPA's flash kernel (FlashAttention-2's) or the flash-attn package's FlashAttention-2 for every
other source (torchtitan, llm-foundry, FSDP's blog, Meta's), priced alike (`sdpa`)."""

from __future__ import annotations

CUDNN_WHY = (
    "Megatron-Core's attention is Transformer Engine's DotProductAttention (transformer_impl "
    "transformer_engine, its default with TE installed, as in NVIDIA's containers); on Hopper TE's backend "
    "choice disables flash-attn 'to give FusedAttention preference on Hopper+ for performance reasons' "
    "(transformer_engine/pytorch attention get_attention_backend): cuDNN's fused attention"
)
UNFUSED_WHY = (
    "trained before flash attention (FlashAttention, Dao et al., arXiv:2205.14135, May 2022) with Megatron-LM's "
    "CoreAttention ({}): the score square materialised, softmax and dropout on it"
)
ATTENTION_KERNEL_OF_SOURCE = {
    "megatron_narayanan_2021": ("unfused", UNFUSED_WHY.format("Narayanan et al., arXiv:2104.04473, April 2021")),
    "mtnlg_2022": ("unfused", UNFUSED_WHY.format("Megatron-DeepSpeed, Smith et al., arXiv:2201.11990, January 2022")),
    "bloom_2022": ("unfused", UNFUSED_WHY.format("Megatron-DeepSpeed, trained March to July 2022")),
    "megatron_core_2024": ("cudnn", CUDNN_WHY),
    "nemo_perf_2407": ("cudnn", "NeMo 24.07 trains with Megatron-Core: " + CUDNN_WHY),
    "nemo_long_seq_2505": ("cudnn", "NeMo 24.03.01 container, Megatron-Core: " + CUDNN_WHY),
    "automodel_ephybrid_2607": (
        "cudnn",
        "NeMo AutoModel @60dfabfe: recipe examples/llm_benchmark/qwen/qwen3_moe_30b_te_deepep.yaml sets "
        "model.backend.attn: te, which nemo_automodel/components/attention/utils.py builds as Transformer "
        "Engine's DotProductAttention (the report's 'TE attention/linear'), on H100: " + CUDNN_WHY,
    ),
}
"""(kernel, why) for the sources that do not run `sdpa`'s figure."""


def attention_kernel(row: dict) -> str:
    """The row's attention kernel: ATTENTION_KERNEL_OF_SOURCE's, else `sdpa`."""
    return ATTENTION_KERNEL_OF_SOURCE.get(str(row["source"]), ("sdpa", ""))[0]
