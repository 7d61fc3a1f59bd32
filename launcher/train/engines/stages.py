"""Cutting a TokenModel (gpt, llama or mlp) into pipeline stages that keep the reference
parameter names.

Stage s of S owns a contiguous slice of the blocks; stage 0 also the embeddings, stage S-1
also the final norm and the head. `blocks` becomes an nn.ModuleDict keyed by the ORIGINAL
block indices, so a stage's `state_dict()` reads `blocks.3.ln1.weight`, `head.weight`…
exactly as the full model's does, and the stages' dicts together are the full model's.
"""

from __future__ import annotations

from collections.abc import Callable
from contextlib import AbstractContextManager, nullcontext

import torch
from torch import nn

from launcher.train.models import TokenModel, embed


def stage_blocks(n_layers: int, n_stages: int, stage: int) -> range:
    """Block indices stage `stage` of `n_stages` owns (contiguous, equal slices)."""
    if n_layers % n_stages:
        raise ValueError(f"{n_layers} layers do not split into {n_stages} equal pipeline stages")
    per = n_layers // n_stages
    return range(stage * per, (stage + 1) * per)


def rank_stages(pp_rank: int, pp: int, v: int) -> list[int]:
    """Stages held by pipeline rank `pp_rank`: r, r+pp, r+2·pp, … (torch's interleaved convention)."""
    return [pp_rank + k * pp for k in range(v)]


class StageModule(nn.Module):
    """One pipeline stage of a TokenModel: token ids (first stage) or hidden states in,
    hidden states or logits (last stage) out. Modules are shared with the source model, not
    copied: built on the meta device, a stage is materialised alone, each parameter from the
    seed and its reference name (models.materialise), as the full model would be."""

    def __init__(
        self,
        model: TokenModel,
        stage: int,
        n_stages: int,
        autocast: Callable[[], AbstractContextManager] | None = None,
    ) -> None:
        super().__init__()
        self.stage, self.n_stages = stage, n_stages
        self.is_first, self.is_last = stage == 0, stage == n_stages - 1
        # Autocast lives inside forward so that torch's metadata inference (which calls the
        # submodule directly, not through the stage's forward path) sees the same dtypes.
        self._autocast = autocast
        if self.is_first:
            self.tok_emb = model.tok_emb
            self.pos_emb = model.pos_emb  # None for llama (rotary positions, inside attention)
        self.blocks = nn.ModuleDict({str(i): model.blocks[i] for i in stage_blocks(len(model.blocks), n_stages, stage)})
        if self.is_last:
            self.ln_f = model.ln_f
            self.head = model.head

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        ctx = self._autocast() if self._autocast is not None else nullcontext()
        with ctx:
            if self.is_first:
                x = embed(self, x)
            for block in self.blocks.values():
                x = block(x)
            if self.is_last:
                x = self.head(self.ln_f(x))
        return x
