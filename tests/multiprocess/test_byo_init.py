"""Your own model's start-up (issue 30, item 9): a module type the launcher has no initialisation rule
for (here an RMSNorm written as Hugging Face writes its own, and a rotary table computed in __init__)
no longer makes every rank build the whole model on the host. The tensors of such types come from a
host build in which the known types (Linear, Embedding, …) stay on the meta device; each rank draws its
own piece of the rest. A 2-rank fsdp trial records what each rank built on the host (those tensors
alone), ends with the 1-process reference's parameters, and starts from the plain build's values of
the unknown tensors; a model whose bulk has no rule is refused at plan time, its module type named."""

from __future__ import annotations

import pytest
import torch

from launcher.cli import main
from launcher.config.compose import compose_config
from launcher.train.models import build_model
from launcher.train.models.byo import ReferenceValues, build_target, unruled
from tests.support.byo import user_package
from tests.support.layout_parity import assert_same, launch, run_trial

MODELS = '''
import torch
from torch import nn


class HFStyleRMSNorm(nn.Module):
    """As transformers' LlamaRMSNorm: ones in __init__, no reset_parameters, no launcher rule."""

    def __init__(self, width, eps=1e-6):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(width))
        self.eps = eps

    def forward(self, x):
        return self.weight * x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps)


class Rotary(nn.Module):
    """A table computed in __init__ (as a rotary embedding's inv_freq): a buffer with no rule."""

    def __init__(self, width):
        super().__init__()
        self.register_buffer("inv_freq", 1.0 / 10000 ** (torch.arange(0, width, 2).float() / width))

    def forward(self, x):
        return x + torch.cos(self.inv_freq).repeat(2)


class Block(nn.Module):
    def __init__(self, width):
        super().__init__()
        self.norm = HFStyleRMSNorm(width)
        self.rotary = Rotary(width)
        self.fc1 = nn.Linear(width, 4 * width)
        self.fc2 = nn.Linear(4 * width, width)

    def forward(self, x):
        return x + self.fc2(torch.relu(self.fc1(self.rotary(self.norm(x)))))


class Net(nn.Module):
    def __init__(self, vocab, width, depth, classes):
        super().__init__()
        self.emb = nn.Embedding(vocab, width)
        self.blocks = nn.ModuleList([Block(width) for _ in range(depth)])
        self.norm = HFStyleRMSNorm(width)
        self.head = nn.Linear(width, classes)

    def forward(self, tokens):
        x = self.emb(tokens)
        for block in self.blocks:
            x = block(x)
        return self.head(self.norm(x).mean(1))


class Wide(nn.Module):
    """A linear layer of its own making: its weight has no launcher rule."""

    def __init__(self, n_in, n_out):
        super().__init__()
        self.weight = nn.Parameter(torch.randn(n_out, n_in) / n_in**0.5)

    def forward(self, x):
        return x @ self.weight.t()


def build(vocab, width, depth=2, classes=10, **unused):  # unused: layout_parity's BASE sets model.n_layers, n_heads
    return Net(vocab, width, depth, classes)


def build_wide(width):
    return nn.Sequential(nn.Embedding(100, width), Wide(width, width))
'''

NORMED = """
_target_: byo_pkg.models.build
vocab: 100
width: 64
inputs: {tokens: {shape: [16], dtype: int64, high: 100}}
target: {shape: [], dtype: int64, high: 10}
loss: cross_entropy
"""

WIDE = """
_target_: byo_pkg.models.build_wide
width: 20000
inputs: {input: {shape: [4], dtype: int64, high: 100}}  # nn.Sequential.forward(input)
"""

WIDTH, DEPTH = 64, 2
UNKNOWN = (DEPTH + 1) * WIDTH + DEPTH * WIDTH // 2  # the norms' weights and the blocks' rotary tables


@pytest.fixture(scope="module")
def user_code(tmp_path_factory):
    with user_package(tmp_path_factory.mktemp("user"), {"models": MODELS}, {"normed": NORMED, "wide": WIDE}) as root:
        yield root


def test_the_host_build_allocates_only_the_tensors_without_a_rule(user_code):
    m = compose_config(["model=normed"]).model
    with torch.device("meta"):
        assert unruled(build_target(m)) == {"HFStyleRMSNorm": (DEPTH + 1) * WIDTH, "Rotary": DEPTH * WIDTH // 2}
    reference = ReferenceValues(m, seed=11)
    assert torch.equal(reference("blocks.1.norm.weight"), torch.ones(WIDTH))
    assert reference.built == UNKNOWN  # not the Linear and Embedding weights
    with pytest.raises(TypeError, match=r"no initialisation for blocks.0.fc1.weight"):
        reference("blocks.0.fc1.weight")  # drawn from (seed, name) on each rank's piece instead
    # Every unknown tensor is what the plain build (the model's own constructor) gives.
    torch.manual_seed(0)
    plain = dict(build_target(m).named_parameters()) | dict(build_target(m).named_buffers())
    built = build_model(m, seed=11).state_dict()
    for name in ["norm.weight", *(f"blocks.{i}.{t}" for i in range(DEPTH) for t in ("norm.weight", "rotary.inv_freq"))]:
        assert torch.equal(built[name], plain[name]), name


@pytest.mark.torch_dist
def test_fsdp_at_2_ranks_builds_only_those_on_the_host_and_matches_the_1_process_reference(user_code, tmp_path):
    model = ["model=normed", "parallel.fsdp_units=[Block]"]
    record = run_trial(tmp_path, "fsdp2", 2, ["parallel=fsdp", "batch.micro=4", *model])
    assert record["trial"]["global_batch"] == 8  # the reference's: 8 samples in 1 process
    params = sum(p.numel() for p in build_model(compose_config(["model=normed"]).model, seed=0).parameters())
    assert record["metrics"]["params"] == params > 50 * UNKNOWN
    assert record["metrics"]["host_init_elements_per_rank"] == [UNKNOWN, UNKNOWN]  # never the model
    run = record["metrics"]["losses"], torch.load(tmp_path / "fsdp2" / "params.pt")
    assert_same(run, launch(tmp_path, "reference", 1, ["parallel=ddp", *model]), rtol=1e-5, atol=1e-6, model=model)


def test_a_model_whose_bulk_has_no_rule_is_refused_at_plan_time_naming_its_type(user_code, tmp_path, capsys):
    results = tmp_path / "results"
    assert main(["sweep", "model=wide", "parallel=fsdp", f"sweep.results_dir={results}"]) == 2
    assert capsys.readouterr().err == (
        "launcher: error: model._target_='byo_pkg.models.build_wide' holds 4e+08 elements in module types the "
        "launcher has no initialisation rule for (Wide 4e+08); every rank would build them whole on the host "
        "(1.6 GB in fp32) instead of its shard: build those layers from torch.nn.Linear, Embedding, Conv, "
        "LayerNorm or RMSNorm (initialised on each rank's shard), or keep such tensors under 2.68e+08 elements\n"
    )
    assert not results.exists()
