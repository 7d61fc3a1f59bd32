"""What a `launcher sweep --detach` of many trials does once, not per trial or per check (issue 30 item 11:
the launcher from the shell against a submitit script; benchmarks/slurm_submit.py times it)."""

from __future__ import annotations

import collections
import dataclasses
import sys

from hydra.core.override_parser.overrides_parser import OverridesParser

from launcher.run.sweep import prepare_sweep


def test_each_override_is_parsed_once_by_the_launcher(tmp_path, monkeypatch):
    """Hydra's ANTLR parser is slow (~1-3 ms an override once warm): the launcher parsed each override once to
    expand a sweep and again to check group values. Hydra parses them for itself as well; those are not counted."""
    given = ["cluster=devcluster", "sweep.nodes=[1,2]", "sweep.repeats=3", f"sweep.results_dir={tmp_path}"]
    ours: collections.Counter[str] = collections.Counter()
    real = OverridesParser.parse_overrides

    def counted(self, overrides):
        if "/launcher/" in sys._getframe(1).f_code.co_filename:
            ours.update(overrides)
        return real(self, overrides)

    monkeypatch.setattr(OverridesParser, "parse_overrides", counted)
    plan = prepare_sweep(given)
    assert len(plan.items) == 6
    assert max(ours.values(), default=0) <= 1, ours


def test_a_trial_dict_is_dataclasses_asdict():
    """Trial.to_dict is a shallow dict (every field a scalar), the document dataclasses.asdict made."""
    plan = prepare_sweep(["sweep.world_sizes=[1,2]", "parallel=pipeline", "model.n_layers=4"])
    for trial, _ in plan.items:
        assert trial.to_dict() == dataclasses.asdict(trial)
        assert list(trial.to_dict()) == [f.name for f in dataclasses.fields(trial)]
        assert all(isinstance(v, (str, int, float, bool)) for v in trial.to_dict().values())
