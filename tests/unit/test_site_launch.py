"""A site launch's sweep folder and sweep id name its layouts. A real run:
tests/multiprocess/test_site_launch_run.py; the site's setup lines on the dev cluster:
tests/slurm/test_site_launch_slurm.py."""

from __future__ import annotations

import dataclasses
import json
import re
from pathlib import Path

from launcher.config.compose import compose_config
from launcher.config.job import job_label
from launcher.run.sweep import create_sweep_dir, finish, prepare_sweep, sweep_id


def test_layout_sweep_folder_names_every_layout(tmp_path):
    plan = prepare_sweep(["parallel=ddp,fsdp", "sweep.world_sizes=[1,2]", f"sweep.results_dir={tmp_path}"])
    folder = create_sweep_dir(plan.cfg, plan.items, [])
    assert re.fullmatch(r"\d{8}-\d{6}-tiny_gpt-ddp\+fsdp", folder.name), folder.name


def _with_layout(cfg, layout: str):
    return dataclasses.replace(cfg, parallel=dataclasses.replace(cfg.parallel, layout=layout))


def test_sweep_id_names_one_layout_or_joins_or_counts_them():
    cfg = compose_config([])
    with_layout = lambda layout: _with_layout(cfg, layout)  # noqa: E731
    assert sweep_id(cfg, 0).endswith("-tiny_gpt-ddp")
    assert sweep_id(cfg, 0, [with_layout("ddp"), with_layout("ddp")]).endswith("-tiny_gpt-ddp")
    assert sweep_id(cfg, 0, [with_layout(x) for x in ("fsdp", "tp", "fsdp")]).endswith("-tiny_gpt-fsdp+tp")
    many = [with_layout(x) for x in ("ddp", "fsdp", "tp", "pipeline")]
    assert sweep_id(cfg, 0, many).endswith("-tiny_gpt-4layouts")
    named = dataclasses.replace(cfg, sweep=dataclasses.replace(cfg.sweep, name="mine"))
    assert sweep_id(named, 0, many) == "mine"


REPO = next(p for p in Path(__file__).resolve().parents if (p / "pyproject.toml").is_file())


def _finished_command_sweep(tmp_path: Path, *overrides: str, recipes: str | None = None) -> Path:
    plan = prepare_sweep(["job=command", "sweep.world_sizes=[1]", f"sweep.results_dir={tmp_path}", *overrides], recipes)
    folder = create_sweep_dir(plan.cfg, plan.items, [], recipes=plan.recipes)
    finish(folder, plan.cfg)
    return folder


def test_a_command_sweep_is_named_after_its_job_not_the_builtin_model(tmp_path, monkeypatch):
    """Issue 31 item 1: a `job=ddp_meter` sweep's folder and report say ddp_meter, and the generic `command`
    recipe says the program's file name; no `tiny_gpt-ddp` and no "Model `tiny_gpt`, layout `ddp`". Fails if
    sweep_id() or finish() name the model and layout of a command job, or if compose's _named_job does not
    record the job recipe's name (job.name)."""
    monkeypatch.chdir(REPO)  # the recipes' argv paths are from the repository root
    recipes = str(REPO / "examples/ddp_meter/recipes")
    folder = _finished_command_sweep(tmp_path / "a", "job=ddp_meter", recipes=recipes)
    assert re.fullmatch(r"\d{8}-\d{6}-ddp_meter", folder.name), folder.name
    report = (folder / "report.md").read_text().splitlines()
    assert report[0] == f"# Sweep {folder.name}"
    assert report[2].startswith("Job `ddp_meter` (`python examples/ddp_meter/train.py '--micro=${batch.micro}' "), (
        report[2]
    )
    assert ", launch torchrun, its model `tiny_gpt`), cluster `local`; micro-batch 8," in report[2]
    assert "layout" not in report[2]
    assert json.loads((folder / "sweep.json").read_text())["config"]["job"]["name"] == "ddp_meter"

    generic = _finished_command_sweep(tmp_path / "b", "job.argv=[python,'examples/ddp_meter/train.py','--steps=3']")
    assert re.fullmatch(r"\d{8}-\d{6}-train.py", generic.name), generic.name
    line = (generic / "report.md").read_text().splitlines()[2]
    assert line.startswith("Job `train.py` (`python examples/ddp_meter/train.py --steps=3`, launch torchrun), cluster")


def test_job_label_of_the_generic_recipe_is_the_programs_file_name():
    """The folder-safe name of a `job=command` sweep: recipe name first, else the program. Fails if job_label
    names the recipe `command` or keeps a character a folder name should not hold."""
    job = compose_config(["job=command", "job.argv=[python,-c,pass]"]).job
    label = lambda **kw: job_label(dataclasses.replace(job, **kw))  # noqa: E731
    assert label(argv=["python", "-m", "mypkg.train", "--lr=1"]) == "mypkg.train"
    assert label(argv=["torchrun", "--nproc-per-node=2", "/opt/x/pretrain_gpt.py"]) == "pretrain_gpt.py"
    assert label(argv=["./run me.sh", "--x"]) == "run_me.sh"
    assert label(argv=["python", "train.py"], name="my_train") == "my_train"
    assert label(argv=["python", "train.py"], name=None) == "train.py"  # a sweep.json from before job names
    assert compose_config([]).job.name == "builtin"
