"""The config layer: the OmegaConf schema, stored documents, renamed keys, and --cfg / --info text."""

from __future__ import annotations

import ast
import dataclasses
import enum
import inspect
import json
from pathlib import Path

import pytest
from omegaconf import OmegaConf

from launcher.config import schema
from launcher.config.compose import PACKAGED_RECIPES, compose_config
from launcher.config.errors import ConfigError
from launcher.config.load import load_config
from launcher.config.plain import to_dict
from launcher.config.schema import LauncherConfig
from launcher.config.show import groups_text, resolved_yaml

DEFAULT = load_config({})


# --- schema -------------------------------------------------------------------------------------

CLASSES = [c for c in vars(schema).values() if isinstance(c, type) and dataclasses.is_dataclass(c)]
CHOICES = [
    c for c in vars(schema).values() if isinstance(c, type) and issubclass(c, enum.StrEnum) and c is not enum.StrEnum
]


@pytest.mark.parametrize("cls", CLASSES, ids=lambda c: c.__name__)
def test_config_classes_are_frozen_keyword_only_with_one_docstring_per_field(cls):
    assert cls.__dataclass_params__.frozen and all(f.kw_only for f in dataclasses.fields(cls))
    source = Path(inspect.getsourcefile(cls)).read_text()  # schema.py or the part it imports the class from
    (node,) = [n for n in ast.parse(source).body if getattr(n, "name", None) == cls.__name__]
    body = node.body
    undocumented = [
        stmt.target.id
        for stmt, nxt in zip(body, [*body[1:], None])
        if isinstance(stmt, ast.AnnAssign)
        and not (isinstance(nxt, ast.Expr) and isinstance(nxt.value, ast.Constant) and isinstance(nxt.value.value, str))
    ]
    assert undocumented == []


@pytest.mark.parametrize("choice", CHOICES, ids=lambda c: c.__name__)
def test_choice_names_are_their_values(choice):
    """OmegaConf looks an Enum member up by name; the config (and JSON) spells its value."""
    assert [m.name for m in choice] == [m.value for m in choice]


def test_choices_behave_as_strings():
    cfg = compose_config(["parallel=fsdp", "parallel.schedule=gpipe"])
    assert cfg.parallel.layout == "fsdp" and f"{cfg.parallel.layout}" == "fsdp"
    assert cfg.parallel.schedule in ("gpipe", "1f1b") and {"fsdp": 1}[cfg.parallel.layout] == 1
    assert json.dumps(cfg.parallel.layout) == '"fsdp"'
    assert type(to_dict(cfg)["parallel"]["layout"]) is str


# --- stored documents ---------------------------------------------------------------------------


def test_document_round_trip_is_exact():
    cfg = compose_config(["model=mlp", "batch.global_batch=64", "optim.lr_scaling=sqrt", "cluster=devcluster"])
    doc = json.loads(json.dumps(to_dict(cfg)))
    assert load_config(doc) == cfg
    assert doc["batch"] == {"micro": 8, "accum": 1, "global_batch": 64}


def test_old_document_with_batch_global_still_loads():
    doc = to_dict(DEFAULT)
    doc["batch"] = {"micro": 4, "accum": 1, "global": 32}
    assert load_config(doc).batch == schema.BatchConfig(micro=4, accum=1, global_batch=32)


@pytest.mark.parametrize("value", ["x${IFS}touch", "\\${x}", "a\\\\${b}\\", "${oc.env:HOME}", "$(date)", "x\\;y\\"])
def test_strings_in_a_document_are_text_never_interpolations(value):
    doc = to_dict(DEFAULT)
    doc["cluster"]["python"] = value
    doc["cluster"]["env"] = [f"A={value}"]
    cfg = load_config(doc)
    assert cfg.cluster.python == value and cfg.cluster.env == [f"A={value}"]


@pytest.mark.parametrize(
    "doc, message",
    [
        ({"batch": {"foo": 1}}, "unknown config key 'batch.foo'; batch has: accum, global_batch, micro"),
        (
            {"foo": 1},
            "unknown config key 'foo'; the top level has: batch, cluster, data, job, model, optim, parallel, "
            "precision, run, seed, sweep, train, trainer",
        ),
        (
            {"parallel": {"layout": "zero9"}},
            "parallel.layout='zero9' is not one of ddp, fsdp, pipeline, tp, dp_pp, fsdp_tp, fsdp_pp, fsdp_tp_pp, "
            "fsdp_ep, ddp_ep, hsdp, fsdp_cp, fsdp_tp_cp, fsdp_tp_pp_cp; set "
            "e.g. parallel.layout=ddp",
        ),
        ({"batch": {"micro": "abc"}}, "batch.micro='abc' must be an integer; e.g. batch.micro=8"),
        ({"sweep": {"world_sizes": 4}}, "sweep.world_sizes=4 must be a list of integers; e.g. sweep.world_sizes=[1,2]"),
        (
            {"sweep": {"world_sizes": [1, "x"]}},
            "sweep.world_sizes holds 'x'; it must be a list of integers; e.g. sweep.world_sizes=[1,2]",
        ),
        (
            {"cluster": {"setup": [["a"]]}},
            "cluster.setup=[['a']] must be a list of strings; e.g. cluster.setup=['a','b']",
        ),
        (
            {"cluster": {"time_limit": None}},
            "cluster.time_limit=null must be a string; e.g. cluster.time_limit=00:30:00",
        ),
    ],
)
def test_bad_document_is_one_line(doc, message):
    with pytest.raises(ConfigError) as info:
        load_config(doc)
    assert str(info.value) == message


# --- the old key on the command line and in recipes -----------------------------------------------


@pytest.mark.parametrize("override", ["batch.global=64", "+batch.global=64", "++batch.global=64"])
def test_old_key_on_the_command_line_names_the_new_one(override):
    with pytest.raises(ConfigError) as info:
        compose_config([override])
    assert str(info.value) == "batch.global was renamed batch.global_batch; use batch.global_batch=64"


def test_old_key_in_a_recipe_names_the_new_one_and_the_recipe_file(tmp_path):
    recipes = tmp_path / "recipes"  # only the file that replaces the bundled batch/default
    (recipes / "batch").mkdir(parents=True)
    (recipes / "batch" / "default.yaml").write_text("micro: 8\naccum: 1\nglobal: 64\n")
    with pytest.raises(ConfigError) as info:
        compose_config([], recipes)
    assert str(info.value) == (
        f"{recipes.resolve() / 'batch' / 'default.yaml'}, line 3: "
        "batch.global was renamed batch.global_batch; write `global_batch:` for `global:`"
    )


# --- --cfg: resolved_yaml -----------------------------------------------------------------------


def test_resolved_yaml_reads_back_as_the_same_config():
    cfg = compose_config(
        [
            "parallel=pipeline",
            "cluster=devcluster",
            "batch.global_batch=64",
            "cluster.python='/opt/x\\${HOME}/python'",
            "sweep.world_sizes=[1,2,4]",
        ]
    )
    text = resolved_yaml(cfg)
    assert "\nbatch:\n  micro: 8\n  accum: 1\n  global_batch: 64\n" in text
    assert "  layout: pipeline\n" in text and "  schedule: 1f1b\n" in text
    assert "  python: /opt/x\\${HOME}/python\n" in text  # escaped: a recipe holding it gives the literal back
    assert text.startswith("model:\n  name: tiny_gpt\n") and text.endswith("seed: 0\nprecision: auto\n")
    assert load_config(OmegaConf.to_container(OmegaConf.create(text), resolve=True)) == cfg


# --- --info: groups_text ------------------------------------------------------------------------


def test_groups_text_lists_groups_options_and_defaults(monkeypatch):
    monkeypatch.delenv("LAUNCHER_RECIPES", raising=False)
    assert groups_text() == (
        f"Config groups in {PACKAGED_RECIPES} (choose with group=option; * marks the default):\n"
        "  model:    deepseek_v3, gpt_125m, gpt_1_3b, gpt_350m, llama3_405b, llama3_70b, llama3_8b, mixtral_8x7b, mlp, "
        "target, tiny_gpt*, tiny_llama, tiny_moe\n"
        "  parallel: ddp*, ddp_ep, dp_pp, fsdp, fsdp_cp, fsdp_ep, fsdp_pp, fsdp_tp, fsdp_tp_cp, fsdp_tp_pp, "
        "fsdp_tp_pp_cp, hsdp, pipeline, tp\n"
        "  batch:    default*\n"
        "  optim:    adamw*, sgd\n"
        "  data:     dataset, file, synthetic*\n"
        "  cluster:  devcluster, example_gpu_site, gb200_nvl72, local*, slurm\n"
        "  sweep:    default*\n"
        "  job:      builtin*, command\n"
        "Defaults: model=tiny_gpt parallel=ddp batch=default optim=adamw data=synthetic cluster=local sweep=default "
        "job=builtin\n"
    )


def test_groups_text_marks_the_users_options_beside_the_bundled_ones(tmp_path):
    recipes = tmp_path / "recipes"
    for name in ("model/my_gpt", "batch/default", "extra/b", "extra/a"):  # extra: a group of the user's own
        (recipes / name).parent.mkdir(parents=True, exist_ok=True)
        (recipes / name).with_suffix(".yaml").write_text("{}\n")
    text = groups_text(recipes)
    assert text.startswith(
        f"Config groups in {recipes.resolve()} (marked +) and the bundled {PACKAGED_RECIPES} "
        "(choose with group=option; * marks the default):\n"
    )
    assert (
        "  model:    deepseek_v3, gpt_125m, gpt_1_3b, gpt_350m, llama3_405b, llama3_70b, llama3_8b, mixtral_8x7b, mlp, "
        "my_gpt+, target, tiny_gpt*, tiny_llama, tiny_moe\n" in text
    )
    assert "  batch:    default*+\n" in text and "  parallel: ddp*, ddp_ep, dp_pp, fsdp," in text
    assert text.endswith(
        "  extra:    a+, b+\nDefaults: model=tiny_gpt parallel=ddp batch=default optim=adamw "
        "data=synthetic cluster=local sweep=default job=builtin\n"
    )


def test_groups_text_refuses_a_recipes_path_that_is_not_a_folder(tmp_path):
    with pytest.raises(ConfigError) as info:
        groups_text(tmp_path / "nope")
    assert str(info.value) == (
        f"--recipes '{tmp_path / 'nope'}' is not a folder; point it at a folder of recipes such as "
        "model/my_gpt.yaml (it adds to the bundled ones)"
    )


def test_default_document_is_the_schema_defaults():
    assert DEFAULT == LauncherConfig()
