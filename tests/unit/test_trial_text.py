"""write_trials dumps each distinct config once and splices it into every trial.json: the files must be
exactly what json_text writes for each trial's document (a reader, and a resumed sweep's comparison of
documents, see no difference). Fails if _document_text's key order, indentation or escaping drifts."""

from __future__ import annotations

from launcher.config.compose import compose_config
from launcher.io import json_text
from launcher.trials.folder import TRIAL_FILE, trial_dir, trial_document, write_trials
from launcher.trials.spec import sweep_trials


def test_each_trial_json_is_the_json_of_its_document(tmp_path):
    plain = compose_config(["sweep.world_sizes=[1,2]", "sweep.repeats=2"])
    # A command whose argv holds a newline, a quote and a non-ASCII character: escapes inside strings.
    odd = compose_config(["job=command", "job.argv=['python','-c','print(\"a\\nb é\")']", "sweep.world_sizes=[1,2]"])
    first = sweep_trials(plain)
    items = [(t, plain) for t in first] + [(t, odd) for t in sweep_trials(odd, first_index=len(first), variant="b")]
    write_trials(tmp_path, items)
    for t, cfg in items:
        assert (trial_dir(tmp_path, t.trial_id) / TRIAL_FILE).read_text() == json_text(trial_document(t, cfg))
    assert len(items) == 6


def test_the_builtin_job_is_named_by_its_recipe_as_before():
    """recipes/job/builtin.yaml names itself (compose would otherwise run a second Hydra pass to learn
    the recipe chosen); the name is the one that pass gave."""
    assert compose_config([]).job.name == "builtin"
    assert compose_config(["job=command", "job.argv=[python,train.py]"]).job.name == "command"
