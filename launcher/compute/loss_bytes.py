"""Bytes a training step's loss moves per logit, by the cross-entropy that runs it (pure: no torch).

The loss reads the head's 16-bit logits (sequence × vocabulary per micro-batch) and writes their gradient; how
many passes it makes over them is the kernel's, and at a narrow model with a large vocabulary (gpt_125m: 768
wide, 50,304 logits a token) the loss is a tenth of a step's time. Each count is of the tensors the size of the
logits each pass reads and writes (a gather or scatter by the target touches one logit a row: not counted).
"""

from __future__ import annotations

from launcher.config.schema_trainer import TrainerConfig

LOSS_BYTES = {"torch": 36, "fused": 6, "vocab_parallel": 52}
"""Bytes per logit, forward and backward, by loss kind:
- `torch`: torch's cross-entropy on a float32 copy of the logits, as the built-in trainer (train/engines: ddp,
  fsdp, tp, pipeline) and torchtitan run it, eager: the copy (read 2, write 4), log-softmax (4, 4), nll's
  gradient written whole (4), log-softmax's backward (reads 4 + 4, writes 4), the gradient cast back (4, 2):
  tests/unit/test_loss_bytes.py counts them on torch's own aten ops;
- `fused`: flash-attn's Triton cross-entropy (flash_attn/ops/triton/cross_entropy.py @058ad35a, llm-foundry's
  `fused_crossentropy`): the forward kernel reads the logits once (online softmax, 2), the backward kernel reads
  them again (2) and writes their 16-bit gradient (2);
- `vocab_parallel`: Megatron's vocab-parallel cross-entropy (megatron/core/tensor_parallel/cross_entropy.py
  @00611e6e): a float32 copy (2, 4), its max (4), the max subtracted in place (4, 4), exp in place (4, 4),
  the sum (4), the division in place (4, 4); backward, the gradient scaled in place (4, 4) and cast back to
  the logits' 16 bits by autograd (4, 2): the test counts its source's ops at tensor parallel 1."""


def loss_kind(trainer: TrainerConfig) -> str:
    """The LOSS_BYTES kind of the trainer's loss (a fused loss first, as memory_activations reads it)."""
    if trainer.fused_loss:
        return "fused"
    return "vocab_parallel" if trainer.vocab_parallel_loss else "torch"
