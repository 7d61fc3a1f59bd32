"""`--recipes DIR` (or $LAUNCHER_RECIPES) adds to the bundled recipes, as a Hydra search path does:
DIR holds only what it adds or replaces, and a file of DIR wins over a bundled one of the same
group/name. Mistakes inside a recipe name its file and line. A real sweep from DIR:
tests/multiprocess/test_recipes_path_sweep.py."""

from __future__ import annotations

from pathlib import Path

import pytest

from launcher.cli import main
from launcher.config.compose import PACKAGED_RECIPES, compose_config

MY_GPT = "# my model\nname: my_gpt\narch: gpt\nvocab_size: 256\nseq_len: 32\nd_model: 64\nn_layers: 2\nn_heads: 2\n"


def recipe_folder(root: Path, files: dict[str, str]) -> Path:
    """A user's recipes folder holding only `files` (group/name.yaml → text)."""
    folder = root / "my_recipes"
    for name, text in files.items():
        (folder / name).parent.mkdir(parents=True, exist_ok=True)
        (folder / name).write_text(text)
    return folder


def refused(argv: list[str], capsys) -> str:
    """The one line a refused command prints (exit 2, nothing on stdout)."""
    assert main(argv) == 2
    out, err = capsys.readouterr()
    assert out == "" and len(err.splitlines()) == 1 and err.startswith("launcher: error: ")
    return err.removeprefix("launcher: error: ").rstrip("\n")


def test_a_folder_with_one_model_composes_with_every_bundled_group(tmp_path):
    mine = recipe_folder(tmp_path, {"model/my_gpt.yaml": MY_GPT})
    for group in ("parallel=fsdp", "parallel=pipeline", "cluster=devcluster", "optim=sgd", "data=synthetic"):
        cfg = compose_config(["model=my_gpt", group], mine)
        assert (cfg.model.name, cfg.model.d_model, cfg.model.n_heads) == ("my_gpt", 64, 2)
    assert compose_config(["parallel=fsdp"], mine).parallel.layout == "fsdp"
    assert compose_config([], mine).model.name == "tiny_gpt"  # the bundled defaults still apply


def test_a_users_file_wins_over_the_bundled_one_of_the_same_name(tmp_path):
    mine = recipe_folder(
        tmp_path,
        {
            "batch/default.yaml": "micro: 3\naccum: 2\n",
            "parallel/fsdp.yaml": "layout: fsdp\nreshard_after_forward: false\n",
        },
    )
    cfg = compose_config(["parallel=fsdp"], mine)
    assert (cfg.batch.micro, cfg.batch.accum, cfg.parallel.reshard_after_forward) == (3, 2, False)
    assert compose_config(["parallel=fsdp"]).parallel.reshard_after_forward is True  # bundled, untouched


def test_a_users_config_yaml_replaces_the_bundled_root(tmp_path):
    root = (PACKAGED_RECIPES / "config.yaml").read_text().replace("model: tiny_gpt", "model: my_gpt")
    mine = recipe_folder(tmp_path, {"config.yaml": root, "model/my_gpt.yaml": MY_GPT})
    assert compose_config([], mine).model.name == "my_gpt"


def test_a_group_left_out_of_the_users_defaults_list_is_one_line(tmp_path, capsys):
    mine = recipe_folder(tmp_path, {"config.yaml": "defaults:\n  - launcher_schema\n  - _self_\n"})
    assert refused(["sweep", "--recipes", str(mine), "parallel=fsdp"], capsys) == (
        f"parallel=fsdp: the defaults list of {mine / 'config.yaml'} has no parallel; "
        "add `- parallel: fsdp` to it, or write +parallel=fsdp"
    )
    assert compose_config(["+parallel=fsdp"], mine).parallel.layout == "fsdp"


def test_launcher_recipes_variable_behaves_as_the_flag(tmp_path, monkeypatch):
    mine = recipe_folder(tmp_path, {"model/my_gpt.yaml": MY_GPT})
    monkeypatch.setenv("LAUNCHER_RECIPES", str(mine))
    assert compose_config(["model=my_gpt", "parallel=fsdp"]).model.name == "my_gpt"


def test_info_marks_the_users_options(tmp_path, capsys):
    mine = recipe_folder(tmp_path, {"model/my_gpt.yaml": MY_GPT})
    assert main(["sweep", "--recipes", str(mine), "--info"]) == 0
    out = capsys.readouterr().out
    assert f"in {mine} (marked +) and the bundled {PACKAGED_RECIPES} " in out
    assert (
        "  model:    deepseek_v3, gpt_125m, gpt_1_3b, gpt_350m, llama3_405b, llama3_70b, llama3_8b, mixtral_8x7b, mlp, "
        "my_gpt+, target, tiny_gpt*, tiny_llama, tiny_moe\n" in out
    )


def test_an_unknown_option_lists_both_folders(tmp_path, capsys):
    mine = recipe_folder(tmp_path, {"model/my_gpt.yaml": MY_GPT})
    assert refused(["sweep", "--recipes", str(mine), "model=nope"], capsys) == (
        f"model=nope is not a recipe in {mine / 'model'} or {PACKAGED_RECIPES / 'model'}; "
        "available: deepseek_v3, gpt_125m, gpt_1_3b, gpt_350m, llama3_405b, llama3_70b, llama3_8b, mixtral_8x7b, mlp, "
        "my_gpt, target, tiny_gpt, tiny_llama, tiny_moe"
    )


def test_a_recipes_path_that_is_not_a_folder_is_one_line(tmp_path, capsys, monkeypatch):
    nope = tmp_path / "nope"
    assert refused(["sweep", "--recipes", str(nope)], capsys).startswith(f"--recipes '{nope}' is not a folder;")
    monkeypatch.setenv("LAUNCHER_RECIPES", str(nope))
    assert refused(["sweep"], capsys).startswith(f"LAUNCHER_RECIPES '{nope}' is not a folder;")


@pytest.mark.parametrize(
    "text, line, message",
    [
        (
            "name: my_gpt\narch: gpt\n  n_layers: [\n",
            3,
            "not valid recipe YAML (mapping values are not allowed here); fix the file",
        ),
        (
            "name: my_gpt\narch: gpt\nn_layer: 2\n",
            3,
            "unknown config key 'model.n_layer'; model has: _target_, activation_checkpointing, arch, aux_loss_coef, "
            "d_model, dense_layers, expert_ffn_hidden, experts_per_token, ffn_hidden, ffn_mult, head_dim, inputs, "
            "kwargs, loss, n_experts, n_heads, n_kv_heads, n_layers, name, norm_eps, rope_theta, seq_len, "
            "shared_experts, target, vocab_size",
        ),
        ("name: my_gpt\n\nseq_len: long\n", 3, "model.seq_len='long' must be an integer; e.g. model.seq_len=64"),
    ],
)
def test_a_mistake_inside_a_recipe_names_its_file_and_line(text, line, message, tmp_path, capsys):
    mine = recipe_folder(tmp_path, {"model/my_gpt.yaml": text})
    results = tmp_path / "results"
    argv = ["sweep", "--recipes", str(mine), "model=my_gpt", f"sweep.results_dir={results}"]
    assert refused(argv, capsys) == f"{mine / 'model' / 'my_gpt.yaml'}, line {line}: {message}"
    assert not results.exists()


def test_a_group_given_a_list_is_one_line(tmp_path, capsys):
    mine = recipe_folder(tmp_path, {"model/my_gpt.yaml": MY_GPT})
    assert refused(["sweep", "--recipes", str(mine), "model=[my_gpt]"], capsys) == (
        "model=[my_gpt]: a config group takes one option name, e.g. model=tiny_gpt; "
        "options: deepseek_v3, gpt_125m, gpt_1_3b, gpt_350m, llama3_405b, llama3_70b, llama3_8b, mixtral_8x7b, mlp, "
        "my_gpt, target, tiny_gpt, tiny_llama, tiny_moe"
    )
