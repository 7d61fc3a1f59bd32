"""Your own model (`_target_`) under a pipeline layout, split where the recipe says
(parallel.pp_split, issue 15): the same losses and final parameters at 2 stages as at 1 rank
under ddp (1e-6), with accumulation; a split the launcher cannot run refused in one line at plan
time, nothing created."""

from __future__ import annotations

import pytest

from launcher.cli import main
from launcher.config.compose import compose_config
from launcher.config.errors import ConfigError
from launcher.train.models.byo_check import check_target
from tests.support.byo import MODELS, NET, user_package
from tests.support.layout_parity import assert_same, launch, reference

# Models torch's tracer cuts badly, or cannot trace.
ODD = '''
import torch
from torch import nn


class Skip(nn.Module):
    """The embedding is read again by the head: at 3 stages it skips the middle one."""

    def __init__(self):
        super().__init__()
        self.emb = nn.Embedding(10, 8)
        self.blocks = nn.ModuleList([nn.Linear(8, 8) for _ in range(2)])
        self.head = nn.Linear(8, 3)

    def forward(self, tokens):
        h = self.emb(tokens)
        x = self.blocks[1](self.blocks[0](h))
        return self.head((x + h).mean(1))


class Branchy(Skip):
    """A branch on the data: torch.export cannot trace it."""

    def forward(self, tokens):
        h = self.emb(tokens)
        return self.head(self.blocks[1](self.blocks[0](h)).mean(1) if h.sum() > 0 else h.mean(1))
'''


@pytest.fixture(scope="module")
def user_code(tmp_path_factory):
    """test_byo_model's package and recipe, plus the models a split cannot run."""
    with user_package(tmp_path_factory.mktemp("user"), {"models": MODELS, "odd": ODD}, {"byo_net": NET}) as root:
        yield root


def test_pipeline_split_by_module_name_equals_one_rank_ddp(user_code, tmp_path):
    """2 stages (emb, blocks.0 | blocks.1, head), 1F1B over 2 microbatches, 2 accumulation steps:
    every step's loss and every final parameter as 1 rank runs them (Block.gain, which no launcher
    rule initialises, included)."""
    net = ["model=byo_net"]
    ref = reference(tmp_path, net)
    run = launch(
        tmp_path,
        "pipeline",
        2,
        [
            *net,
            "parallel=pipeline",
            "parallel.pp_split=[blocks.1]",
            "parallel.microbatches=2",
            "batch.micro=4",
            "batch.accum=2",
        ],
    )
    assert_same(run, ref, model=net)


NO_SPLIT = (
    "parallel.layout=pipeline cannot split model._target_='byo_pkg.models.build' into pipeline stages by itself: "
    "give the module names where a stage begins, e.g. parallel.pp_split=[blocks.2]; or use parallel=ddp or "
    "parallel=fsdp"
)
BAD = [
    (
        ["parallel.pp_split=[blocks.9]"],
        "parallel.pp_split names 'blocks.9', no module of model._target_='byo_pkg.models.build'; "
        "blocks holds blocks.0, blocks.1: name the module where a stage begins",
    ),
    (
        ["parallel.pp_split=[blocks.1]", "sweep.world_sizes=[4]"],
        "world size 4: parallel.pp_split=['blocks.1'] has 1 "
        "boundary = 2 stages but parallel=pipeline runs pp=4 (the world size, 4) pipeline ranks, one stage each; "
        "list 3 module "
        "names where a stage begins, or measure world size 2 (sweep.world_sizes=[2])",
    ),
    (
        ["parallel=dp_pp", "parallel.pp=2", "parallel.pp_split=[blocks.0,blocks.1]"],
        "world size 2: parallel.pp_split="
        "['blocks.0', 'blocks.1'] has 2 boundaries = 3 stages but parallel=dp_pp runs pp=2 (parallel.pp) pipeline "
        "ranks, one "
        "stage each; list 1 module name where a stage begins, or set parallel.pp=3",
    ),
    ([], NO_SPLIT),
    (
        ["parallel=fsdp_pp", "parallel.pp=2", "parallel.pp_split=[blocks.1]"],
        "parallel.layout=fsdp_pp cannot split "
        "model._target_='byo_pkg.models.build': a split by module name (parallel.pp_split) runs under "
        "parallel=pipeline or "
        "parallel=dp_pp; or use parallel=fsdp",
    ),
    (
        ["parallel=ddp", "parallel.pp_split=[blocks.1]"],
        "parallel.pp_split=['blocks.1'] cuts pipeline stages, which "
        "parallel.layout=ddp has none of; use parallel=pipeline or parallel=dp_pp, or drop parallel.pp_split",
    ),
    (
        ["parallel.pp_split=[blocks.1]", "parallel.schedule=interleaved_1f1b"],
        "parallel.schedule=interleaved_1f1b runs 2 "
        "stages per rank, but parallel.pp_split=['blocks.1'] cuts one per rank; use parallel.schedule=1f1b or gpipe",
    ),
]


@pytest.mark.parametrize("overrides, message", BAD, ids=[" ".join(o) or "no split" for o, _ in BAD])
def test_a_split_that_cannot_run_is_one_line_exit_2_nothing_created(user_code, tmp_path, capsys, overrides, message):
    results = tmp_path / "results"
    argv = [
        "sweep",
        "model=byo_net",
        "parallel=pipeline",
        "sweep.world_sizes=[2]",
        *overrides,
        f"sweep.results_dir={results}",
    ]
    assert main(argv) == 2
    assert capsys.readouterr().err == f"launcher: error: {message}\n"
    assert not results.exists()


def test_a_split_on_a_builtin_model_is_refused(tmp_path, capsys):
    argv = [
        "sweep",
        "parallel=pipeline",
        "parallel.pp_split=[blocks.1]",
        "sweep.world_sizes=[2]",
        f"sweep.results_dir={tmp_path}",
    ]
    assert main(argv) == 2
    assert capsys.readouterr().err == (
        "launcher: error: world size 2: parallel.pp_split=['blocks.1'] splits a `_target_` "
        "model; the built-in model tiny_gpt splits its blocks evenly by itself: drop "
        "parallel.pp_split\n"
    )


def _target(name: str):
    inputs = "model.inputs={tokens:{shape:[4],dtype:int64,high:10}}"
    return compose_config(
        [
            "model=target",
            f"model._target_=byo_pkg.odd.{name}",
            inputs,
            "model.target={shape:[],dtype:int64,high:3}",
            "model.loss=cross_entropy",
        ]
    ).model


def test_the_trace_is_checked_on_the_meta_device(user_code):
    """A tensor that skips a stage, and a forward torch.export cannot trace: one line each."""
    with pytest.raises(ConfigError) as skip:
        check_target(_target("Skip"), pp_split=["blocks.0", "blocks.1"])
    assert str(skip.value) == (
        "model._target_='byo_pkg.odd.Skip': pipeline stage 2 reads embedding from stage 0, not from "
        "the stage before it; move a boundary so no tensor skips a stage"
    )
    with pytest.raises(ConfigError) as branchy:
        check_target(_target("Branchy"), pp_split=["blocks.1"])
    text = str(branchy.value)
    assert text.startswith(
        "model._target_='byo_pkg.odd.Branchy': tracing it for parallel.pp_split=['blocks.1'] raised "
    )
    assert text.endswith(
        "; torch.export must trace the forward for a pipeline split; or use parallel=ddp or parallel=fsdp"
    )
    assert "\n" not in text


def test_plan_on_presets_refuses_a_pipeline_split_in_one_line(user_code, capsys):
    argv = [
        "plan",
        "model=byo_net",
        "parallel=pipeline",
        "parallel.pp_split=[blocks.1]",
        "cluster=example_gpu_site",
        "--gpus",
        "2",
    ]
    assert main(argv) == 2
    assert capsys.readouterr().err == (
        "launcher: error: launcher plan on presets models a `_target_` model under ddp or "
        "fsdp or hsdp only, not parallel.layout=pipeline; measure it with a sweep and plan --from that\n"
    )
