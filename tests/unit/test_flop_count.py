"""Counted training FLOPs (launcher/compute/flop_count.py) against the analytic formula
(launcher/compute/flops.py) for the built-in models, built on the meta device; the CPU fallback
for a model meta cannot run; and the per-sweep cache."""

from __future__ import annotations

import dataclasses
import json

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from launcher.compute import flops
from launcher.compute.flop_count import (
    FLOPS_FILE,
    FlopCount,
    cached_flops,
    count_flops,
    flops_key,
    random_tensor,
    torch_dtype,
)
from launcher.config.compose import compose_config
from launcher.config.schema import InputSpec, ModelConfig
from launcher.train.models import build_model
from launcher.train.models.byo import counted_flops_per_token


class WithLoss(nn.Module):
    """A built-in model as a `_target_` model sees it: token rows of seq_len+1 in, the
    next-token cross-entropy out."""

    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__()
        self.lm = build_model(cfg)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        logits = self.lm(tokens[:, :-1])
        return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), tokens[:, 1:].reshape(-1))


def counted(cfg: ModelConfig, micro: int = 2) -> FlopCount:
    tokens = {"tokens": torch.randint(0, cfg.vocab_size, (micro, cfg.seq_len + 1))}
    return count_flops(lambda: WithLoss(cfg), tokens, tokens_per_sample=cfg.seq_len)


def recipe(name: str, **shrink) -> ModelConfig:
    """A built-in recipe's shapes; `shrink` (fewer layers) keeps the meta build quick without
    changing a layer's FLOPs per token."""
    return dataclasses.replace(compose_config([f"model={name}"]).model, **shrink)


@pytest.mark.parametrize(
    "cfg",
    [
        recipe("tiny_gpt"),
        recipe("gpt_125m"),
        recipe("tiny_llama"),
        recipe("llama3_8b", n_layers=2, seq_len=2048),
        recipe("tiny_moe"),  # per active parameter: router, top-2 of 4 experts, the shared one
    ],
    ids=["tiny_gpt", "gpt_125m", "tiny_llama", "llama3_8b_2_layers", "tiny_moe"],
)
def test_counted_flops_per_token_equal_the_formula_within_2_percent(cfg):
    """The counter misses only the 6 FLOPs per norm weight and bias the formula's 6N counts:
    -0.8% on tiny_gpt (d=128), -0.08% on gpt_125m, less on Llama (no biases)."""
    c = counted(cfg)
    assert c.counted_on == "meta" and c.meta_error is None
    assert c.per_token == pytest.approx(flops.flops_per_token(cfg), rel=0.02)
    assert c.per_token <= flops.flops_per_token(cfg)  # what is missing is the norms' and biases' share
    assert c.backward == 2 * c.forward  # every counted op: backward twice its forward
    assert c.per_sample == c.per_token * cfg.seq_len == (c.forward + c.backward) / 2


def test_per_sample_flops_do_not_depend_on_the_micro_batch():
    cfg = recipe("tiny_gpt")
    assert counted(cfg, micro=1).per_sample == counted(cfg, micro=3).per_sample


class NeedsValues(nn.Module):
    """An image model whose forward reads a tensor's value (`.item()`): no meta kernel can."""

    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(3, 8, 3, padding=1)
        self.fc = nn.Linear(8 * 8 * 8, 10)

    def forward(self, image: torch.Tensor) -> torch.Tensor:
        x = self.conv(image)
        scale = 1.0 if x.abs().max().item() >= 0 else 0.0
        return self.fc(x.flatten(1)) * scale


def test_a_model_meta_cannot_run_is_counted_by_one_cpu_step():
    batch = {"image": torch.randn(4, 3, 8, 8), "label": torch.randint(0, 10, (4,))}
    c = count_flops(NeedsValues, batch, lambda model, b: F.cross_entropy(model(b["image"]), b["label"]))
    assert c.counted_on == "cpu" and "meta" in c.meta_error
    conv = 2 * 8 * 8 * (3 * 9) * 8  # per sample: 2 × outputs (8 ch × 8 × 8) × (3 ch × 3 × 3) inputs each
    fc = 2 * (8 * 8 * 8) * 10
    # backward: the conv's weight gradient only (the image needs none), the linear's both gradients
    assert c.per_sample == conv + fc + conv + 2 * fc
    assert c.tokens_per_sample is None and c.per_token is None  # an image has no token dimension


def test_the_loss_comes_from_the_step_or_from_the_model():
    class Logits(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.fc = nn.Linear(4, 3)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.fc(x)

    x = {"x": torch.randn(5, 4)}
    with pytest.raises(ValueError, match="not a scalar tensor"):
        count_flops(Logits, x)  # the default step: forward's output is the loss, and this one is none
    xy = {**x, "y": torch.zeros(5, dtype=torch.int64)}
    c = count_flops(Logits, xy, lambda model, b: F.cross_entropy(model(b["x"]), b["y"]))
    assert (c.forward, c.backward, c.counted_on, c.micro) == (5 * 2 * 4 * 3, 5 * 2 * 4 * 3, "meta", 5)  # no input grad
    with pytest.raises(TypeError, match="not a torch.nn.Module"):
        count_flops(lambda: "a model", x)


def test_random_tensors_follow_their_spec():
    ids = random_tensor(
        InputSpec(shape=[16], dtype="int64", low=3, high=7), (4,), generator=torch.Generator().manual_seed(0)
    )
    assert ids.shape == (4, 16) and ids.dtype == torch.int64 and {int(v) for v in ids.unique()} <= set(range(3, 7))
    assert random_tensor(InputSpec(shape=[3], dtype="bfloat16"), (2,), device="meta").dtype == torch.bfloat16
    with pytest.raises(ValueError, match="not a torch dtype"):
        torch_dtype(InputSpec(shape=[2], dtype="int65"))


def test_the_sweep_folder_caches_one_count_per_key(tmp_path):
    calls = []

    def compute() -> FlopCount:
        calls.append(1)
        return counted(recipe("tiny_gpt"))

    key = flops_key({"_target_": "m.build", "width": 8}, {"tokens": [65]}, 2)
    assert key == flops_key({"width": 8, "_target_": "m.build"}, {"tokens": [65]}, 2)  # key order is no change
    first = cached_flops(tmp_path, key, compute)
    assert cached_flops(tmp_path / "trials" / "t0001", key, compute) == first and len(calls) == 1  # a trial of it
    assert json.loads((tmp_path / FLOPS_FILE).read_text())[key]["per_sample"] == first.per_sample
    cached_flops(tmp_path, flops_key("another recipe"), compute)
    assert len(calls) == 2 and len(json.loads((tmp_path / FLOPS_FILE).read_text())) == 2
    (tmp_path / FLOPS_FILE).write_text("{torn")
    assert cached_flops(tmp_path, key, compute) == first and len(calls) == 3  # unreadable cache: count again


def test_the_built_in_gpt_as_a_target_model_counts_its_formula_once_per_sweep(tmp_path):
    """The payload's path for a `_target_` model (models/byo.py): tiny_gpt through
    launcher.train.models.token_model, counted within 2% of the formula, cached in the sweep
    folder of the trial folder it is given, and read back from there by the next trial."""
    cfg = recipe("tiny_gpt")
    fields = {f: getattr(cfg, f) for f in ("arch", "vocab_size", "seq_len", "d_model", "n_layers", "n_heads")}
    tokens = InputSpec(shape=[cfg.seq_len], dtype="int64", high=cfg.vocab_size)
    m = ModelConfig(
        _target_="launcher.train.models.token_model",
        kwargs=fields,
        inputs={"idx": tokens},
        target=tokens,
        loss="cross_entropy",
    )
    first = counted_flops_per_token(m, 2, tmp_path / "trials" / "000-ws1")
    assert first == pytest.approx(flops.flops_per_token(cfg), rel=0.02)
    (entry,) = json.loads((tmp_path / FLOPS_FILE).read_text()).values()
    assert entry["counted_on"] == "meta" and entry["per_token"] == first
    (tmp_path / FLOPS_FILE).write_text(
        json.dumps({k: {**v, "per_sample": 1.0} for k, v in json.loads((tmp_path / FLOPS_FILE).read_text()).items()})
    )
    assert counted_flops_per_token(m, 4, tmp_path / "trials" / "001-ws2") == 1.0 / cfg.seq_len  # read, not counted
