"""What Hydra users expect of a command line: --cfg prints the composed config, --info the
groups; every verb answers --help."""

from __future__ import annotations

import pytest
from omegaconf import OmegaConf

from launcher import cli
from launcher.config.load import load_config


def test_cfg_prints_the_resolved_config_and_runs_nothing(tmp_path, capsys):
    results = tmp_path / "r"
    rc = cli.main(["sweep", "model=mlp", "batch.micro=4", f"sweep.results_dir={results}", "--cfg"])
    out = capsys.readouterr().out
    cfg = load_config(OmegaConf.to_container(OmegaConf.create(out)))
    assert rc == 0 and not results.exists()
    assert (cfg.model.name, cfg.model.arch, cfg.batch.micro, cfg.batch.global_batch) == ("mlp", "mlp", 4, None)


def test_cfg_of_a_comma_sweep_prints_each_combination(capsys):
    assert cli.main(["sweep", "batch.accum=1,4", "--cfg"]) == 0
    docs = capsys.readouterr().out.split("# --- ")[1:]
    assert [d.splitlines()[0] for d in docs] == ["accum1", "accum4"]
    yamls = [d.split("\n", 1)[1] for d in docs]
    assert [load_config(OmegaConf.to_container(OmegaConf.create(y))).batch.accum for y in yamls] == [1, 4]


def test_cfg_with_bad_input_is_one_line_exit_2(capsys):
    assert cli.main(["plan", "batch.micro=0", "--cfg"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == ["launcher: error: batch.micro=0 must be a positive integer; set e.g. batch.micro=8"]


@pytest.mark.parametrize("argv", [["--info"], ["run", "--info"]])
def test_info_lists_groups_options_and_defaults(argv, capsys):
    assert cli.main(argv) == 0
    out = capsys.readouterr().out
    assert (
        "  parallel: ddp*, ddp_ep, dp_pp, fsdp, fsdp_cp, fsdp_ep, fsdp_pp, fsdp_tp, fsdp_tp_cp, fsdp_tp_pp, "
        "fsdp_tp_pp_cp, hsdp, pipeline, tp" in out
    )
    assert "Defaults: model=tiny_gpt parallel=ddp" in out


def test_info_with_your_recipes_marks_your_options(tmp_path, capsys):
    (tmp_path / "model").mkdir()
    (tmp_path / "model" / "mine.yaml").write_text("name: mine\narch: mlp\n")
    assert cli.main(["--recipes", str(tmp_path), "--info"]) == 0
    assert "mine+" in next(ln for ln in capsys.readouterr().out.splitlines() if ln.strip().startswith("model:"))


def test_no_verb_is_one_usage_error(capsys):
    with pytest.raises(SystemExit) as stop:
        cli.main([])
    assert stop.value.code == 2 and "a command is required" in capsys.readouterr().err


@pytest.mark.parametrize("verb", sorted(cli.VERBS))
def test_every_verb_answers_help(verb, capsys):
    with pytest.raises(SystemExit) as stop:
        cli.main([verb, "--help"])
    assert stop.value.code == 0
    assert f"usage: launcher {verb}" in capsys.readouterr().out
