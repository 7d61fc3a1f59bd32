"""A sweep's trial.json files: each distinct config is converted to a document once (OmegaConf's
conversion, ~50 ms, once per trial was most of submitting a 256-trial sweep), and every file holds
exactly what trial_document says, trial fields and all."""

from __future__ import annotations

import json

from launcher.config import plain
from launcher.config.compose import compose_config
from launcher.run.sweep import create_sweep_dir, prepare_sweep
from launcher.trials.folder import TRIAL_FILE, trial_dir, trial_document


def test_one_conversion_per_distinct_config_and_the_same_documents(tmp_path, monkeypatch):
    # Two variants (two layouts) × 2 sizes × 3 repeats: 12 trials sharing 2 configs.
    plan = prepare_sweep(["parallel.layout=ddp,fsdp", "sweep.repeats=3", f"sweep.results_dir={tmp_path}"])
    assert len(plan.items) == 12 and len({id(c) for _, c in plan.items}) == 2
    calls = []
    real = plain.to_dict
    monkeypatch.setattr("launcher.trials.folder.to_dict", lambda cfg: calls.append(cfg) or real(cfg))
    sweep_dir = create_sweep_dir(plan.cfg, plan.items, [])
    assert len(calls) == 2
    monkeypatch.undo()
    for t, cfg in plan.items:
        written = json.loads((trial_dir(sweep_dir, t.trial_id) / TRIAL_FILE).read_text())
        assert written == json.loads(json.dumps(trial_document(t, cfg), default=str))


def test_equal_configs_that_are_distinct_objects_still_convert_right(tmp_path):
    cfg = compose_config([f"sweep.results_dir={tmp_path}", "sweep.repeats=2"])
    twin = compose_config([f"sweep.results_dir={tmp_path}", "sweep.repeats=2", "seed=7"])
    plan = prepare_sweep([f"sweep.results_dir={tmp_path}", "sweep.repeats=2"])
    items = [(t, cfg if i % 2 else twin) for i, (t, _) in enumerate(plan.items)]
    sweep_dir = create_sweep_dir(cfg, items, [])
    for t, c in items:
        doc = json.loads((trial_dir(sweep_dir, t.trial_id) / TRIAL_FILE).read_text())
        assert doc["config"]["seed"] == c.seed and doc["trial"]["trial_id"] == t.trial_id
