"""What an optimizer step moves through memory, per parameter, as the kernel that runs it does (pure: no torch).

Fused: one kernel reads and writes each fp32 tensor once (torch's `fused=True`, Apex's and Transformer Engine's
FusedAdam, Megatron's distributed optimizer): AdamW reads weight, grad, m, v and writes weight, m, v (7 × 4 B);
SGD with momentum reads weight, grad, buffer and writes weight, buffer (5 × 4 B).
Unfused: torch's default, what the launcher's trainer runs (launcher/train/loop.build_optimizer leaves `fused`
unset: foreach kernels on CUDA, a for-loop of the same operations on CPU), a pass per operation over whole
tensors, counted from torch 2.13's torch/optim/adam.py _multi_tensor_adam (l. 553; lerp_ of m with the grad
12 B, mul_ of v 8, addcmul_ 12, sqrt 8, div_ 8, add_ of eps 8, addcdiv_ into the weight 16 = 72) and sgd.py
_multi_tensor_sgd (l. 382; mul_ of the buffer 8, add_ of the grad 12, add_ into the weight 12 = 32). A weight
decay adds a pass there (DECAY_BYTES: AdamW's mul_ of the weight, SGD's grad.add(weight) into a new tensor) and
nothing to a fused kernel. torchtitan made fused its default in Feb 2025 (pytorch/torchtitan PR #881: 1.6-3.6%
faster steps on Llama 3 8B than foreach).
"""

from __future__ import annotations

FUSED_BYTES = {"adamw": 28, "sgd": 20}
"""Bytes per parameter of a fused step (module docstring)."""
UNFUSED_BYTES = {"adamw": 72, "sgd": 32}
"""Bytes per parameter of torch's default foreach or for-loop step, weight decay 0 (module docstring)."""
DECAY_BYTES = {"adamw": 8, "sgd": 12}
"""What a weight decay adds to an unfused step, per parameter (module docstring)."""


def step_bytes(optimizer: str, *, fused: bool, decay: bool = False) -> int:
    """Bytes per parameter one optimizer step moves, `decay`: with a weight decay; ValueError for an optimizer not
    counted here."""
    table = FUSED_BYTES if fused else UNFUSED_BYTES
    if optimizer not in table:
        raise ValueError(f"optimizer {optimizer!r}: its step's bytes are counted for {', '.join(table)} only")
    return table[optimizer] + (DECAY_BYTES[optimizer] if decay and not fused else 0)
