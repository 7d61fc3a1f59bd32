"""A site launch's sweep folder and sweep id name its layouts. A real run:
tests/multiprocess/test_site_launch_run.py; the site's setup lines on the dev cluster:
tests/slurm/test_site_launch_slurm.py."""

from __future__ import annotations

import dataclasses
import re

from launcher.config.compose import compose_config
from launcher.run.sweep import create_sweep_dir, prepare_sweep, sweep_id


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
