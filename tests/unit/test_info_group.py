"""`launcher --info GROUP` lists the group's fields, each with its type, default and the doc
schema.py gives it (read from the source once); an unknown group is one line, exit 2."""

from __future__ import annotations

import dataclasses

import pytest

from launcher import cli
from launcher.config.field_docs import field_docs, groups, top_level_keys
from launcher.config.schema import LauncherConfig, ParallelConfig


def test_info_parallel_prints_every_field_its_type_default_and_doc(capsys):
    assert cli.main(["--info", "parallel"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("parallel (ParallelConfig): ")
    docs = field_docs()["ParallelConfig"]
    for f in dataclasses.fields(ParallelConfig):
        assert docs[f.name], f.name  # schema.py documents every field
        assert "\n".join(f"      {line}" for line in docs[f.name].splitlines()) in out, f.name
    lines = out.splitlines()
    layouts = (
        "ddp, fsdp, pipeline, tp, dp_pp, fsdp_tp, fsdp_pp, fsdp_tp_pp, fsdp_ep, ddp_ep, hsdp, fsdp_cp, fsdp_tp_cp, "
        "fsdp_tp_pp_cp"
    )
    assert f"  parallel.layout: Layout ({layouts}) = ddp" in lines
    assert "  parallel.tp: int | None = null" in lines
    assert "  parallel.reshard_after_forward: bool = true" in lines
    assert "  parallel.fsdp_units: list[str] = []" in lines
    layout_doc = (
        "      How ranks split the work (dp × tp × pp = world size), a row of launcher/layouts.py: ddp, fsdp: all dp;"
    )
    assert layout_doc in lines


def test_every_group_is_documented_field_by_field():
    """The docs are the dataclasses' own: a field without one would print `(no doc)`."""
    for group, cls in groups().items():
        assert set(field_docs()[cls.__name__]) == {f.name for f in dataclasses.fields(cls)}, group


@pytest.mark.parametrize("group", ["nope", "seeds"])
def test_an_unknown_group_is_one_line_and_exit_2(capsys, group):
    assert cli.main(["--info", group]) == 2
    out, err = capsys.readouterr()
    assert out == ""
    assert err == (
        f"launcher: error: --info {group!r} is no config group or top-level key; the groups are "
        f"{', '.join(groups())}, the top-level keys seed, precision\n"
    )
    assert list(groups())[:4] == ["model", "parallel", "batch", "optim"]


def test_info_precision_answers_as_a_group_does(capsys):
    """Issue 31 item 13: `launcher --info precision` (README's table names the key) printed "no config group" and
    exit 2. Fails if field_docs.group_text answers only the dataclass groups."""
    assert cli.main(["--info", "precision"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[:3] == [
        "precision (a top-level key of LauncherConfig, set as precision=value): its type = default, then what it does",
        "  precision: Precision (auto, fp32, bf16, fp16, fp8) = auto",
        "      Training precision: fp32, or autocast (FSDP: MixedPrecisionPolicy) to bf16/fp16. `auto`:",
    ]


@pytest.mark.parametrize("key", sorted(top_level_keys()))
def test_every_top_level_key_answers_info_with_its_doc(capsys, key):
    """Every scalar field of LauncherConfig (seed, precision, and any added later) answers --info with its default
    and its schema doc. Fails if a new top-level key is left out of top_level_keys() or has no doc."""
    assert cli.main(["--info", key]) == 0
    out = capsys.readouterr().out
    doc = field_docs()["LauncherConfig"][key]
    assert f"\n  {key}: " in out and "\n".join(f"      {line}" for line in doc.splitlines()) in out
    assert set(top_level_keys()) | set(groups()) == {f.name for f in dataclasses.fields(LauncherConfig)}


def test_info_alone_still_lists_the_groups_and_their_options(capsys):
    assert cli.main(["--info"]) == 0
    assert capsys.readouterr().out.startswith("Config groups in ")
