"""The mixture-of-experts rows of the published replay (Qwen3-30B-A3B: NeMo AutoModel on H100, NousResearch's
torchtitan on B200): what each source's stack runs, as the shape model prices it."""

from __future__ import annotations

from benchmarks.replay_attention import ATTENTION_KERNEL_OF_SOURCE, attention_kernel


def test_automodels_te_attention_backend_is_priced_as_cudnns_fused_attention_on_hopper():
    """NeMo AutoModel's recipe qwen3_moe_30b_te_deepep sets model.backend.attn: te, Transformer Engine's
    DotProductAttention, which picks cuDNN's fused attention on Hopper: the H100 rows run at cuDNN's cited rate
    (522 of 989 TFLOP/s at head dim 128, 16K), not FlashAttention-2's (328)."""
    assert attention_kernel({"source": "automodel_ephybrid_2607"}) == "cudnn"
    why = ATTENTION_KERNEL_OF_SOURCE["automodel_ephybrid_2607"][1]
    assert "qwen3_moe_30b_te_deepep.yaml" in why and "backend.attn: te" in why and "@60dfabfe" in why
    # torchtitan (NousResearch's fork) keeps the sdpa figure
    assert attention_kernel({"source": "nous_deepep_2511"}) == "sdpa"
