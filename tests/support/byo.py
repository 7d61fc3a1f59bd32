"""Your own model by `_target_` (issue 15): the user's package and recipes that
tests/multiprocess/test_byo_model.py, test_byo_pipeline.py and
tests/slurm/test_byo_model_slurm.py write outside the repo."""

from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

MODELS = '''
import torch
from torch import nn


class Block(nn.Module):
    def __init__(self, width):
        super().__init__()
        self.norm = nn.LayerNorm(width)
        self.fc1 = nn.Linear(width, 2 * width)
        self.fc2 = nn.Linear(2 * width, width)
        self.gain = nn.Parameter(torch.full((width,), 0.5))  # a tensor no launcher rule initialises

    def forward(self, x):
        return x + self.fc2(torch.relu(self.fc1(self.norm(x)))) * self.gain


class Net(nn.Module):
    """Token ids → class scores."""

    def __init__(self, vocab, width, depth, classes):
        super().__init__()
        self.emb = nn.Embedding(vocab, width)
        self.blocks = nn.ModuleList([Block(width) for _ in range(depth)])
        self.head = nn.Linear(width, classes)

    def forward(self, tokens):
        x = self.emb(tokens)
        for block in self.blocks:
            x = block(x)
        return self.head(x.mean(1))


def build(vocab, width, depth=2, classes=10, **unused):  # unused: layout_parity's BASE sets model.n_layers, n_heads
    return Net(vocab, width, depth, classes)
'''

DATA = '''
from torch.utils.data import Dataset

from launcher.train.data import SyntheticTokens


class ShiftedRows(Dataset):
    """The built-in synthetic token rows as (inputs, targets): what TokenModel's loss compares."""

    def __init__(self, num_samples, seq_len, vocab_size, seed):
        self.rows = SyntheticTokens(num_samples, seq_len, vocab_size, seed)

    def __len__(self):
        return len(self.rows)

    def __getitem__(self, i):
        row = self.rows[i]
        return row[:-1], row[1:]
'''

NET = """
_target_: byo_pkg.models.build
vocab: 100
width: 32
inputs: {tokens: {shape: [16], dtype: int64, high: 100}}
target: {shape: [], dtype: int64, high: 10}
loss: cross_entropy
"""

# The built-in GPT of tests/support/layout_parity.py's BASE, through the `_target_` path.
GPT = """
_target_: launcher.train.models.token_model
arch: gpt                # ModelConfig's own names, here the callable's keyword arguments
vocab_size: 256
seq_len: 64
d_model: 128
n_layers: 4
n_heads: 8
inputs: {idx: {shape: [64], dtype: int64, high: 256}}
target: {shape: [64], dtype: int64, high: 256}
loss: cross_entropy
"""

SWEEP = [
    "model=byo_net",
    "optim=sgd",
    "batch.micro=4",
    "sweep.world_sizes=[1,2]",
    "sweep.steps=4",
    "sweep.warmup_steps=1",
    "parallel.fsdp_units=[Block]",
    "cluster.peak_flops_per_device=1e11",
]


@contextlib.contextmanager
def user_package(root: Path, modules: dict[str, str], recipes: dict[str, str]) -> Iterator[Path]:
    """`byo_pkg` with these modules and a recipe folder with these model recipes, written under
    `root` (outside the repo); the package on PYTHONPATH (and on this process's sys.path, where
    the plan-time check imports it), the recipes by LAUNCHER_RECIPES, all as before afterwards."""
    (root / "byo_pkg").mkdir()
    (root / "byo_pkg" / "__init__.py").write_text("")
    for name, text in modules.items():
        (root / "byo_pkg" / f"{name}.py").write_text(text)
    (root / "recipes" / "model").mkdir(parents=True)
    for name, text in recipes.items():
        (root / "recipes" / "model" / f"{name}.yaml").write_text(text)
    forget_package()  # a test file run before this one in the same worker imported its own byo_pkg
    with pytest.MonkeyPatch.context() as mp:
        mp.syspath_prepend(str(root))
        mp.setenv("PYTHONPATH", os.pathsep.join(filter(None, [str(root), os.environ.get("PYTHONPATH")])))
        mp.setenv("LAUNCHER_RECIPES", str(root / "recipes"))
        try:
            yield root
        finally:
            forget_package()


def forget_package() -> None:
    """byo_pkg and its modules out of sys.modules: each file's user_package imports its own."""
    for name in [m for m in sys.modules if m == "byo_pkg" or m.startswith("byo_pkg.")]:
        del sys.modules[name]
