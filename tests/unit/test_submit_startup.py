"""What a `launcher sweep --detach` of many trials does once, not per trial or per check (issue 30 item 11:
the launcher from the shell against a submitit script; benchmarks/slurm_submit.py times it)."""

from __future__ import annotations

import collections
import dataclasses
import os
import sys
import tempfile

import jinja2
import pytest
from hydra.core.override_parser.overrides_parser import OverridesParser

from launcher.config.messages import parsed_override
from launcher.run.sweep import prepare_sweep
from launcher.slurm import render


def test_each_override_is_parsed_once_by_the_launcher(tmp_path, monkeypatch):
    """Hydra's ANTLR parser is slow (~1-3 ms an override once warm): the launcher parsed each override once to
    expand a sweep and again to check group values. Hydra parses them for itself as well; those are not counted.
    `optim.lr=3e-4` (an exponent) is outside the overrides read without Hydra (config/simple_override.py), so the
    command takes Hydra's road, where the parsing happens."""
    given = [
        "cluster=devcluster",
        "sweep.nodes=[1,2]",
        "sweep.repeats=3",
        f"sweep.results_dir={tmp_path}",
        "optim.lr=3e-4",
    ]
    ours: collections.Counter[str] = collections.Counter()
    real = OverridesParser.parse_overrides

    def counted(self, overrides):
        if "/launcher/" in sys._getframe(1).f_code.co_filename:
            ours.update(overrides)
        return real(self, overrides)

    monkeypatch.setattr(OverridesParser, "parse_overrides", counted)
    parsed_override.cache_clear()  # what an earlier test parsed in this process is parsed again here
    plan = prepare_sweep(given)
    assert len(plan.items) == 6
    assert set(ours) == set(given), ours  # Hydra's road: every override parsed (by the launcher) …
    assert max(ours.values()) == 1, ours  # … once


def test_a_trial_dict_is_dataclasses_asdict():
    """Trial.to_dict is a shallow dict (every field a scalar), the document dataclasses.asdict made."""
    plan = prepare_sweep(["sweep.world_sizes=[1,2]", "parallel=pipeline", "model.n_layers=4"])
    for trial, _ in plan.items:
        assert trial.to_dict() == dataclasses.asdict(trial)
        assert list(trial.to_dict()) == [f.name for f in dataclasses.fields(trial)]
        assert all(isinstance(v, (str, int, float, bool)) for v in trial.to_dict().values())


@pytest.fixture
def fresh_templates(tmp_path, monkeypatch):
    """render's jinja environment made anew, its kept templates under tmp_path (the temp dir)."""
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    render._environment.cache_clear()
    yield tmp_path
    render._environment.cache_clear()


def test_job_templates_are_compiled_once_across_runs(fresh_templates, monkeypatch):
    """The job templates' compiled code is kept (jinja's bytecode cache, per user, 0700): compiling them was
    ~30 ms of every submission. A later run loads it, checked against the template's text."""
    render._environment().get_template("trial.sbatch.j2")
    assert [p.name for p in fresh_templates.iterdir()] == [f"_jinja2-cache-{os.getuid()}"]
    render._environment.cache_clear()
    monkeypatch.setattr(jinja2.Environment, "compile", lambda *a, **k: pytest.fail("compiled again"))
    assert isinstance(render._environment().get_template("trial.sbatch.j2"), jinja2.Template)


def test_a_cache_folder_not_safe_to_use_is_only_a_cache_missed(fresh_templates):
    (fresh_templates / f"_jinja2-cache-{os.getuid()}").write_text("a file where jinja's folder would be")
    env = render._environment()
    assert env.bytecode_cache is None and env.get_template("trial.sbatch.j2") is not None


def test_the_sweep_spec_is_made_durable_with_its_trials_and_appears_last(tmp_path, monkeypatch):
    """create_sweep_dir: sweep.json and every trial.json are flushed together (one syncfs, no fsync: each one is
    a journal commit, ~20 ms on the shared machine under load), and sweep.json is renamed into place after every
    trial.json, so a folder that holds sweep.json holds each trial it plans."""
    import json

    from launcher.run.sweep import create_sweep_dir

    plan = prepare_sweep(["sweep.world_sizes=[1,2]", "sweep.repeats=2", f"sweep.results_dir={tmp_path}"])
    fsyncs, placed = [], []
    real_replace = os.replace
    monkeypatch.setattr(os, "fsync", lambda fd: fsyncs.append(fd))
    monkeypatch.setattr(os, "replace", lambda a, b: (placed.append(os.path.basename(b)), real_replace(a, b))[1])
    sweep_dir = create_sweep_dir(plan.cfg, plan.items, ["sweep.world_sizes=[1,2]"])
    assert fsyncs == [] and placed == ["trial.json"] * 4 + ["sweep.json"]
    spec = json.loads((sweep_dir / "sweep.json").read_text())
    assert [t["trial_id"] for t in spec["trials"]] == [t.trial_id for t, _ in plan.items]
    assert spec["overrides"] == ["sweep.world_sizes=[1,2]"] and spec["sweep_id"] == sweep_dir.name
