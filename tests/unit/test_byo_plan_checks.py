"""What a new user of `_target_` gets wrong, refused at plan time in one line (exit 2, nothing
created), each line naming what the model does have: FSDP unit classes it does not hold, a TP plan
that names no module (answered with a plan the check accepts), ids above the vocabulary, an input
named after no parameter of the forward. Checked on the meta device: nothing allocated, no rank."""

from __future__ import annotations

import re

import pytest

from launcher.cli import main
from launcher.config.compose import compose_config
from launcher.config.errors import ConfigError
from launcher.train.models.byo_check import check_targets
from tests.support.byo import GPT, MODELS, NET, user_package

TARGET = "model._target_='byo_pkg.models.build'"


@pytest.fixture(scope="module")
def user_code(tmp_path_factory):
    with user_package(tmp_path_factory.mktemp("user"), {"models": MODELS}, {"byo_net": NET, "byo_gpt": GPT}) as root:
        yield root


def refused(overrides: list[str], capsys, tmp_path) -> str:
    """The one line `launcher sweep` answers with (exit 2), having created nothing. (One short trial
    at one rank, should the check ever let it through: a regression costs seconds, not a sweep.)"""
    small = ["sweep.world_sizes=[1]", "sweep.steps=2", "sweep.warmup_steps=1"]
    assert main(["sweep", *overrides, *small, f"sweep.results_dir={tmp_path / 'results'}", "--quiet"]) == 2
    out, err = capsys.readouterr()
    assert out == "" and err.count("\n") == 1 and err.startswith("launcher: error: ")
    assert not (tmp_path / "results").exists()
    return err.removeprefix("launcher: error: ").rstrip("\n")


def test_fsdp_units_naming_no_class_of_the_model_is_refused_with_its_classes(user_code, capsys, tmp_path):
    line = refused(["model=byo_net", "parallel=fsdp", "parallel.fsdp_units=[Blok]"], capsys, tmp_path)
    assert line == (
        f"parallel.fsdp_units names 'Blok', no class of a module inside {TARGET}, so FSDP would wrap nothing by "
        "it; its classes: Block, Embedding, LayerNorm, Linear; e.g. parallel.fsdp_units=[Block]"
    )
    # The root's own class is no unit either (the root holds what the units do not).
    assert "names 'Net', no class" in refused(["model=byo_net", "parallel.fsdp_units=[Block,Net]"], capsys, tmp_path)
    check_targets([compose_config(["model=byo_net", "parallel=fsdp", "parallel.fsdp_units=[Block,Linear]"])])


def _suggested(message: str) -> str:
    return re.search(r"(parallel\.tp_plan=\{[^}]*\})", message)[1]


def test_the_tp_plan_hint_suggests_names_the_check_accepts(user_code):
    """Follow the hints from a tp layout without a plan: each suggestion applied, the check passes."""
    overrides = ["model=byo_net", "parallel=tp"]
    for _ in range(3):
        try:
            check_targets([compose_config(overrides)])
            break
        except ConfigError as exc:
            assert "parallel.tp_plan={" in str(exc), str(exc)
            # The suggestion is a whole plan: it replaces the one given (on the command line, two merge).
            overrides = [*(o for o in overrides if not o.startswith("parallel.tp_plan=")), _suggested(str(exc))]
    else:
        pytest.fail(f"the hints never led to a plan the check accepts: {overrides}")
    # The module names of the model, each block's index as *: what parallelize_module matches.
    with pytest.raises(ConfigError) as info:
        check_targets(
            [compose_config(["model=byo_net", "parallel=tp", "parallel.tp_plan={fc1: colwise, fc2: rowwise}"])]
        )
    assert str(info.value) == (
        f"parallel.tp_plan.fc1 names no module of {TARGET}: a pattern is the whole dotted name, * for any part; "
        "e.g. parallel.tp_plan={blocks.*.fc1: colwise, blocks.*.fc2: rowwise}"
    )
    check_targets([compose_config(["model=byo_net", "parallel=tp", _suggested(str(info.value))])])
    # A name no Linear ends with: the model's Linear and Embedding modules are listed instead.
    with pytest.raises(
        ConfigError, match=r"its Linear and Embedding modules: emb, blocks\.\*\.fc1, blocks\.\*\.fc2, head$"
    ):
        check_targets([compose_config(["model=byo_net", "parallel=tp", "parallel.tp_plan={mlp: colwise}"])])


def test_ids_above_the_embeddings_rows_are_refused(user_code, capsys, tmp_path):
    line = refused(["model=byo_net", "model.inputs.tokens.high=101"], capsys, tmp_path)
    assert line == (
        f"model.inputs.tokens.high=101 is above the 100 rows of emb (nn.Embedding) of {TARGET}: ids up to 100 would "
        "index past it; set model.inputs.tokens.high=100"
    )
    check_targets([compose_config(["model=byo_net", "model.inputs.tokens.high=100"])])


def test_ids_above_model_vocab_size_are_refused(user_code, capsys, tmp_path):
    line = refused(["model=byo_gpt", "model.inputs.idx.high=300"], capsys, tmp_path)
    assert line == (
        "model.inputs.idx.high=300 is above model.vocab_size=256: ids up to 299 would index past the vocabulary; "
        "set model.inputs.idx.high=256"
    )


def test_an_input_named_after_no_forward_parameter_says_so_and_lists_them(user_code, capsys, tmp_path):
    line = refused(
        ["model=byo_net", "~model.inputs.tokens", "+model.inputs.toks={shape:[16],dtype:int64,high:100}"],
        capsys,
        tmp_path,
    )
    assert line == (
        "model.inputs.toks: Net.forward(tokens) has no parameter named 'toks'; name each input after a forward "
        "parameter: tokens"
    )
    assert "shapes or dtypes" not in line
    linear = ["model=target", "model._target_=torch.nn.Linear", "model.kwargs={in_features:4,out_features:2}"]
    assert refused([*linear, "model.inputs={x:{shape:[4]}}"], capsys, tmp_path) == (
        "model.inputs.x: Linear.forward(input) has no parameter named 'x'; name each input after a forward "
        "parameter: input"
    )
