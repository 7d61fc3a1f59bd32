"""The `trainer` config group: how the trainer that runs a recipe keeps what the memory estimate
counts, where it is not the built-in trainer (Megatron, torchtitan, llm-foundry, a command of your
own), so `launcher plan` can estimate that trainer's memory (and, for tp_comm_overlap, its step
time). Every default is the built-in trainer's; a sweep of the built-in trainer refuses anything
else (builtin_support.py), since its engines do not implement it and the predicted-OOM gate would
pass what then runs out.

Kept apart from schema.py (whose 400 lines are full); `LauncherConfig.trainer` holds it, and
field_docs.py reads this module's field docs as it reads schema.py's.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(kw_only=True, frozen=True)
class TrainerConfig:
    fused_loss: bool = False
    """The loss is a fused cross-entropy (flash-attn's, as llm-foundry's `loss_fn: fused_crossentropy`; Liger's):
    it keeps the 16-bit logits and writes their gradient, never a float32 copy of sequence × vocabulary. False:
    the built-in trainer's torch cross-entropy on float32 logits (about 14 bytes a logit at its peak)."""
    norm_16bit: bool = False
    """LayerNorm/RMSNorm keep their input as it comes and return a 16-bit output (MPT's low_precision_layernorm,
    torchtitan's fused_rmsnorm, Transformer Engine's); matters under 16-bit compute. False: the built-in trainer's
    norms (float32 outputs under autocast; llama's RMSNorm keeps a float32 copy of its input)."""
    distributed_optimizer: bool = False
    """Megatron's mixed precision with its distributed optimizer (`--bf16 --use-distributed-optimizer`):
    16-bit weights held whole on each rank, gradients in one float32 buffer of the rank's model part, float32
    master weights and AdamW moments sharded over dp (ZeRO-1); activations 16-bit. Any layout with data
    parallelism (fsdp rows: the traffic a Megatron run moves, reduce-scatter and all-gather)."""
    vocab_parallel_loss: bool = False
    """The loss is Megatron's vocab-parallel cross-entropy (megatron/core/tensor_parallel/cross_entropy.py,
    fused or not): one float32 copy of the 16-bit logits, shifted, exponentiated and normalised in place, saved
    and turned into its gradient in place; about 6 bytes a logit beside nothing else. False: the built-in
    trainer's torch cross-entropy (about 14 bytes a logit at its peak)."""
    master_weight_remainders: bool = False
    """With trainer.distributed_optimizer under bf16: the sharded master weights are kept as the 16 bits a bf16
    weight lacks, 2 bytes a parameter, not 4 (Apex DistributedFusedAdam's store_param_remainders, which NeMo's
    megatron_base_model.setup_optimization sets for bf16 weights with a float32 optimizer)."""
    grad_sync_16bit: bool = False
    """With trainer.distributed_optimizer: gradients are accumulated, held and reduce-scattered in 16 bits, a
    16-bit buffer of the rank's model part (2 bytes a parameter, not 4) and half the data-parallel traffic (Apex
    DistributedFusedAdam's grad_sync_dtype=bf16, which NeMo-Framework-Launcher's H100 examples pass:
    examples/training/gpt/h100/20b_fp8_8node.sh, llama3 70b; Megatron-core without --grad-reduce-in-fp32)."""
    fused_swiglu: bool = False
    """SwiGLU runs as one autograd function that saves its input (gate and up) and recomputes silu in backward
    (Megatron-core's bias_swiglu_impl, megatron/core/fusions/fused_bias_swiglu.py, under bias_activation_fusion;
    NeMo's `activation: fast-swiglu`): a llama block keeps no silu output. False: the built-in trainer's
    F.silu(gate) * up, which keeps silu's output for the product's backward."""
    pipeline_fsdp_16bit: bool = False
    """FSDP applies its 16-bit MixedPrecisionPolicy inside pipeline stages too (torchtitan's apply_fsdp passes
    mp_policy whatever pp is, and reshard_after_forward=False there): a stage's parameters are gathered in 16 bits
    only and its activations are 16-bit. False: the built-in trainer's pipeline stages, float32 parameters under
    autocast (its 16-bit copies beside them)."""
    checkpoint_every_nth_block: int = 0
    """Every n-th block is wrapped whole in activation checkpointing and keeps only its input, the others what
    model.activation_checkpointing keeps (fms-fsdp's `selective_checkpointing`: fms_fsdp/policies/ac_handler.py
    wraps a block when its count % n == 0). 0: no block beyond what model.activation_checkpointing says."""
    weights_16bit: bool = False
    """The model is built in 16 bits and trained so: no float32 master weights, the sharded gradients and the
    optimizer's moments in the parameters' 16-bit dtype (NeMo AutoModel: NeMoAutoModelForCausalLM.from_config's
    torch_dtype "auto" is bfloat16, nemo_automodel/_transformers/auto_model.py @60dfabfe, and torch.optim.Adam
    keeps its moments in the parameter's dtype); FSDP's unsharded gradients while accumulating stay float32 (its
    reduce_dtype). Under 16-bit compute only. False: the built-in trainer's float32 master parameters."""
    tp_comm_overlap: bool = False
    """Tensor parallel's sequence-parallel all-gathers and reduce-scatters are split into tp chunks and
    pipelined against the matmul that consumes or produces them, so a collective waits only for its first (or
    last) chunk where the matmul outlasts the rest: Megatron-core's `--tp-comm-overlap` (Transformer Engine's
    userbuffers; Megatron-LM's README runs its weak-scaling table with it), NeMo's `ub_tp_comm_overlap: True`
    (NeMo-Framework-Launcher conf/training/gpt3/20b.yaml @1a7171d7), torchtitan's async TP
    (`parallelism.enable_async_tensor_parallel`). False: every tp collective on the critical path, as in the
    built-in trainer."""
    experts_outside_fsdp: bool = False
    """Where expert parallelism spans the whole data-parallel group (dp = ep), the routed experts are left out of
    FSDP (NeMo AutoModel: nemo_automodel/components/moe/parallelizer.py @60dfabfe apply_fsdp wraps the experts in
    fully_shard only when the ep-shard mesh is larger than 1, else passes them as the block's ignored_params): a
    rank's experts are whole parameters, never gathered, whose gradient accumulates in place with no unsharded copy
    beside it. False: FSDP over the dp ÷ ep ranks holding them however many (torchtitan's)."""
    ep_dispatch_copies: int = 0
    """Copies of a token an expert-parallel dispatch sends (and its combine returns): a dispatcher that sends a
    token once per destination rank (DeepEP: get_dispatch_layout's is_token_in_rank, the 'per-token deduplicated
    destination bytes' NeMo AutoModel's DeepEP/HybridEP report @60dfabfe counts) moves as many copies as the ranks
    its experts are on, 1 where routing puts a token's experts on one rank (AutoModel's fake balanced gate:
    nemo_automodel/components/moe/layers.py @60dfabfe FakeBalancedGate routes token i to experts 8i..8i+7 mod
    128, one rank's block at ep 8 and 16). 0: one copy per routed expert (model.experts_per_token), as
    torchtitan's all-to-all and the built-in trainer send."""
