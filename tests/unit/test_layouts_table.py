"""The layout traits table (launcher/layouts.py) is the one place a layout is described: every
recipe has a row and every row a recipe, each row's engine module defines an engine, a new row
alone gives a new layout its degrees, checks, traffic and engine, and no other module tests a
layout by its name."""

from __future__ import annotations

import ast
import dataclasses
import importlib
from pathlib import Path

import pytest
import yaml

from launcher import layouts
from launcher.config.compose import compose_config
from launcher.config.errors import ConfigError
from launcher.config.schema import Layout
from launcher.config.validate import validate
from launcher.layouts import LAYOUTS, DataParallel, Degree, LayoutTraits, traits
from launcher.perf.shapes import shape_for
from launcher.trials.layout import layout_degrees
from launcher.trials.spec import make_trial

ROOT = Path(__file__).resolve().parents[2]
RECIPES = sorted((ROOT / "recipes" / "parallel").glob("*.yaml"))


def test_every_recipe_has_a_row_and_every_row_a_recipe():
    named = {p.stem: yaml.safe_load(p.read_text())["layout"] for p in RECIPES}
    assert all(stem == layout for stem, layout in named.items()), named
    assert sorted(named) == sorted(LAYOUTS)


def test_the_config_choice_is_the_table():
    assert list(Layout.__members__) == list(LAYOUTS)


@pytest.mark.parametrize("name", list(LAYOUTS))
def test_each_rows_engine_modules_import_and_define_an_engine(name):
    from launcher.train.engines.base import Engine  # lazy: torch, for this test only

    row = LAYOUTS[name]
    for module in filter(None, (row.engine, row.byo_engine)):
        engine = importlib.import_module(module).ENGINE
        assert isinstance(engine, type) and issubclass(engine, Engine), (name, module)


@pytest.mark.parametrize(
    "name, degrees",
    [
        ("ddp", (8, 1, 1)),
        ("fsdp", (8, 1, 1)),
        ("pipeline", (1, 1, 8)),
        ("tp", (1, 8, 1)),
        ("dp_pp", (4, 1, 2)),
        ("fsdp_tp", (4, 2, 1)),
        ("fsdp_pp", (4, 1, 2)),
        ("fsdp_tp_pp", (2, 2, 2)),
    ],
)
def test_degrees_of_todays_layouts_at_eight_ranks(name, degrees):
    cfg = compose_config([f"parallel={name}", "model.n_layers=8", "model.n_heads=8", "parallel.microbatches=8"])
    assert layout_degrees(cfg, 8) == degrees


def _with_layout(cfg, layout: str, **parallel):
    return dataclasses.replace(cfg, parallel=dataclasses.replace(cfg.parallel, layout=layout, **parallel))


@pytest.fixture
def ddp_tp(monkeypatch):
    """A made-up 2-D layout, DDP replicas of tensor-parallel groups, run by the fsdp_tp engine's
    module: one row, nothing else."""
    row = LayoutTraits(data_parallel="ddp", tp="set", engine="launcher.train.engines.fsdp", checkpoint=True)
    monkeypatch.setitem(LAYOUTS, "ddp_tp", row)
    return _with_layout(compose_config(["model.n_heads=4"]), "ddp_tp", tp=2)


def test_a_new_row_alone_gives_its_degrees_and_trials(ddp_tp):
    assert layout_degrees(ddp_tp, 8) == (4, 2, 1)
    trial = make_trial(ddp_tp, index=0, world_size=8, steps=3, warmup_steps=1)
    assert (trial.layout, trial.dp, trial.tp, trial.pp, trial.global_batch) == ("ddp_tp", 4, 2, 1, 8 * 4)
    with pytest.raises(ConfigError, match=r"^world size 5 is not a multiple of parallel.tp=2; dp × tp × pp"):
        layout_degrees(ddp_tp, 5)


def test_a_new_row_alone_gives_its_validation(ddp_tp):
    validate(ddp_tp)
    with pytest.raises(ConfigError, match=r"^parallel.layout=ddp_tp needs parallel.tp=<degree ≥ 1>; set e.g."):
        validate(_with_layout(ddp_tp, "ddp_tp", tp=None))
    compiled = dataclasses.replace(ddp_tp, train=dataclasses.replace(ddp_tp.train, compile=True))
    with pytest.raises(ConfigError, match=r"supported with parallel.layout=ddp or fsdp, not ddp_tp;"):
        validate(compiled)
    with pytest.raises(ConfigError, match=r"cannot split model._target_='m.build' across tensor-parallel"):
        layout_degrees(_byo(_with_layout(ddp_tp, "ddp_tp", tp_plan={"fc1": "colwise"})), 8)


def _byo(cfg):
    """`cfg` training a `_target_` model instead of the built-in one."""
    return dataclasses.replace(cfg, model=dataclasses.replace(cfg.model, _target_="m.build"))


def test_a_new_row_alone_gives_its_traffic_and_engine(ddp_tp):
    from launcher.train.engines import engine_class  # lazy: torch, for this test only
    from launcher.train.engines.fsdp import FSDPEngine  # lazy: as above

    shape = shape_for(ddp_tp, 8)
    assert (shape.dp, shape.tp, shape.pp) == (4, 2, 1)
    assert shape.traffic.data_parallel == DataParallel.ddp
    assert shape.traffic.param_bytes == 0 and shape.traffic.grad_bytes > 0  # DDP: no gathers, one all-reduce
    assert shape.traffic.tp_collectives > 0
    assert engine_class("ddp_tp", byo=False) is FSDPEngine
    with pytest.raises(ValueError, match="ddp_tp has no engine for a `_target_` model"):
        engine_class("ddp_tp", byo=True)


def test_a_row_whose_degree_follows_the_world_takes_it(monkeypatch):
    monkeypatch.setitem(LAYOUTS, "all_tp", LayoutTraits(data_parallel="none", tp="world", engine="x.y"))
    assert layout_degrees(_with_layout(compose_config(["model.n_heads=4"]), "all_tp"), 4) == (1, 4, 1)


def test_every_dimension_of_the_table_runs_in_trials():
    """cp, ep and hsdp's replicate once had room in the table and a refusal; each now has rows that run."""
    for dim in ("cp", "ep", "replicate"):
        assert any(getattr(row, dim) != Degree.none for row in LAYOUTS.values()), dim


@pytest.mark.parametrize(
    "traits_, message",
    [
        (dict(data_parallel="ddp", tp="world"), "dp follows the world size, so tp cannot too"),
        (dict(data_parallel="none"), "need one dimension of degree world, got []"),
        (dict(data_parallel="none", tp="world", pp="world"), "need one dimension of degree world, got ['tp', 'pp']"),
        (dict(data_parallel="ddp", virtual_stages=True), "virtual_stages apply to a pipeline only"),
        (dict(data_parallel="ddp", replicate="set"), "replicate × shard needs data_parallel fsdp, not ddp"),
        (dict(data_parallel="zero"), "data_parallel='zero' must be one of ddp, fsdp, none"),
        (dict(data_parallel="ddp", tp="some"), "tp='some' must be one of none, world, set"),
    ],
)
def test_an_impossible_row_fails_when_written(traits_, message):
    with pytest.raises(ValueError) as err:
        LayoutTraits(engine="x.y", **traits_)
    assert message in str(err.value)


def test_an_unknown_layout_names_the_table():
    with pytest.raises(ValueError, match=r"^parallel.layout='zz' is no layout; choose one of ddp, fsdp, pipeline"):
        traits("zz")


def _layout_name_tests(path: Path, root: Path = ROOT) -> list[str]:
    """Where a module compares a value with a layout's name, or writes two or more layout names
    as a tuple, list, set or dict's keys (a membership test's operand, or a constant one)."""
    names = set(LAYOUTS)

    def is_name(node: ast.AST | None) -> bool:
        return isinstance(node, ast.Constant) and node.value in names

    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Compare) and any(is_name(n) for n in (node.left, *node.comparators)):
            found.append(f"{path.relative_to(root)}:{node.lineno}: compares with a layout name")
        items = node.keys if isinstance(node, ast.Dict) else getattr(node, "elts", None)
        if isinstance(node, (ast.Tuple, ast.List, ast.Set, ast.Dict)) and sum(map(is_name, items)) >= 2:
            found.append(f"{path.relative_to(root)}:{node.lineno}: a collection of layout names")
    return found


def test_no_module_but_the_table_tests_a_layout_by_its_name():
    table = Path(layouts.__file__).resolve()
    offenders = [f for p in sorted((ROOT / "launcher").rglob("*.py")) if p != table for f in _layout_name_tests(p)]
    assert not offenders, "\n".join(offenders)


def test_the_name_test_sees_what_it_forbids(tmp_path):
    (tmp_path / "launcher").mkdir()
    bad = tmp_path / "launcher" / "bad.py"
    bad.write_text('A = ("fsdp", "fsdp_tp")\nif x.layout == "dp_pp" or y in {"tp": 1, "ddp": 2}:\n    pass\n')
    assert len(_layout_name_tests(bad, tmp_path)) == 3
