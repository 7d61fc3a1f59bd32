"""A Hugging Face transformers causal LM as a `launcher` model, built from a config: no weights
are downloaded and nothing reaches the network. `_target_: hf_causal_lm_example.build`.

Given `labels`, a transformers model computes its own loss, so the recipe has no `loss` key.
"""

from __future__ import annotations

from torch import nn
from transformers import AutoModelForCausalLM, LlamaConfig


def build(
    vocab_size: int = 256,
    hidden_size: int = 64,
    intermediate_size: int = 172,
    num_hidden_layers: int = 2,
    num_attention_heads: int = 4,
    num_key_value_heads: int = 2,
    max_position_embeddings: int = 128,
) -> nn.Module:
    """A Llama-architecture model of the given shape, randomly initialised."""
    config = LlamaConfig(
        vocab_size=vocab_size,
        hidden_size=hidden_size,
        intermediate_size=intermediate_size,
        num_hidden_layers=num_hidden_layers,
        num_attention_heads=num_attention_heads,
        num_key_value_heads=num_key_value_heads,
        max_position_embeddings=max_position_embeddings,
    )
    return AutoModelForCausalLM.from_config(config)
