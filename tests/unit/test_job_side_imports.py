"""The job side needs only torch and the standard library (issue 29, item 1).

Every process that runs on a compute node, usually inside the site's container image (the
built-in payload, the link probe, rank_exec, a command trial's record step, the meter a user's
program imports), is started here with the control plane's packages made unimportable, and
reads a real trial document. The stored document is rebuilt by the standard library
(config/plain.py) into exactly the config OmegaConf's checked loader gives, and `_target_` is
found and called without Hydra (train/models/target.py).

What fails these: an `import omegaconf` (or hydra, pandas, rich, …) reached from any job-side
module at import time, e.g. trials/folder.py importing config/load.py again, or byo.py going
back to `hydra.utils.instantiate`; plain.from_dict building a value of another type or choice
than OmegaConf's loader.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import subprocess
import sys
import textwrap

import pytest

from launcher.config.compose import compose_config
from launcher.config.errors import ConfigError
from launcher.config.load import load_config
from launcher.config.plain import from_dict, to_dict
from launcher.train.models.target import instantiate
from launcher.trials.folder import trial_document
from launcher.trials.spec import sweep_trials

CONTROL_PLANE = ("hydra", "omegaconf", "yaml", "pandas", "pyarrow", "jinja2", "matplotlib", "rich", "antlr4")
JOB_SIDE = (
    "launcher.train.__main__",
    "launcher.train.link_probe",
    "launcher.train.command_record",
    "launcher.trials.rank_exec",
    "launcher.meter",
)
# The callbacks run inside your HF Trainer or Lightning program, whose frameworks need yaml, jinja2 and
# the like themselves: there, the launcher's part must be the meter alone.
INTEGRATIONS = ("launcher.integrations.hf", "launcher.integrations.lightning")
# The control-plane packages unimportable (an entry of None in sys.modules: `import x` raises
# ImportError), then the entry point imported and, where given, a trial document read.
_BLOCKED = textwrap.dedent(
    """
    import importlib, json, sys
    for name in {blocked!r}:
        sys.modules[name] = None
    importlib.import_module({module!r})
    doc = {doc}
    if doc is not None:
        from launcher.trials.folder import from_document
        trial, cfg = from_document(doc)
        print(json.dumps({{"trial": trial.trial_id, "layout": cfg.parallel.layout.name}}))
    loaded = sorted({{m.split(".")[0] for m, v in sys.modules.items() if v is not None}} & set({blocked!r}))
    print(json.dumps({{"loaded": loaded}}))
    """
)


def _run_blocked(module: str, doc: dict | None = None, blocked: tuple[str, ...] = CONTROL_PLANE) -> list[str]:
    code = _BLOCKED.format(blocked=blocked, module=module, doc=repr(doc))
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    return proc.stdout.splitlines()


@functools.cache
def _document(*overrides: str) -> dict:
    cfg = compose_config(list(overrides))
    trial = sweep_trials(cfg)[0]
    return json.loads(json.dumps(trial_document(trial, cfg)))


@pytest.mark.parametrize("module", JOB_SIDE)
def test_each_job_side_entry_point_imports_without_the_control_plane(module):
    out = _run_blocked(module)
    assert json.loads(out[-1]) == {"loaded": []}


@pytest.mark.parametrize("module", INTEGRATIONS)
def test_the_callbacks_bring_only_the_meter(module):
    code = f"import sys, {module}; print(sorted(m for m in sys.modules if m.startswith('launcher')))"
    for name in ("hydra", "omegaconf", "pandas", "pyarrow"):
        code = f"sys.modules[{name!r}] = None; " + code
    proc = subprocess.run([sys.executable, "-c", "import sys; " + code], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.split("\n")[0] == str(sorted(["launcher", "launcher.meter", "launcher.integrations", module]))


def test_the_payload_reads_a_trial_document_without_the_control_plane():
    doc = _document("parallel=fsdp", "sweep.world_sizes=[2]", "model=tiny_llama")
    out = _run_blocked("launcher.train.__main__", doc)
    assert json.loads(out[0]) == {"trial": doc["trial"]["trial_id"], "layout": "fsdp"}


CASES = [
    (),
    ("model=tiny_llama", "parallel=fsdp_tp", "sweep.world_sizes=[4]"),
    ("model=tiny_moe", "parallel=fsdp_ep", "parallel.ep=2", "sweep.world_sizes=[2]"),
    ("parallel=pipeline", "sweep.world_sizes=[2]", "parallel.schedule=interleaved_1f1b"),
    ("parallel=hsdp", "sweep.world_sizes=[4]", "parallel.shard=2", "precision=bf16"),
    ("job=command", "job.argv=[python,train.py,'--micro=${batch.micro}']", "job.metrics=regex",
     "job.pattern='tok/s=(?P<tokens_per_s>[0-9.]+)'", "job.env={A: b}"),
    ("cluster=devcluster", "cluster.container_image=img.sqsh", "cluster.container_mounts=[/a:/b]", "optim=sgd"),
    ("model=target", "model._target_=torch.nn.Linear", "+model.in_features=4", "+model.out_features=2",
     "model.inputs={input: {shape: [4]}}", "model.loss=mse", "model.target={shape: [2]}"),
]  # fmt: skip


@pytest.mark.parametrize("overrides", CASES, ids=range(len(CASES)))
def test_plain_reader_builds_what_the_omegaconf_loader_builds(overrides):
    cfg = compose_config(list(overrides))
    stored = json.loads(json.dumps(to_dict(cfg)))
    assert from_dict(stored) == load_config(stored)
    assert stored == json.loads(json.dumps(to_dict(load_config(stored))))


def test_plain_reader_refuses_an_unknown_key_and_a_wrong_kind_in_one_line():
    stored = json.loads(json.dumps(to_dict(compose_config([]))))
    with pytest.raises(ConfigError, match=r"^unknown config key 'batch.micr' in a stored trial"):
        from_dict({**stored, "batch": {**stored["batch"], "micr": 2}})
    with pytest.raises(ConfigError, match=r"^batch.micro='2' must be int$"):
        from_dict({**stored, "batch": {**stored["batch"], "micro": "2"}})
    with pytest.raises(ConfigError, match=r"^parallel.layout='dpp' is not one of ddp, "):
        from_dict({**stored, "parallel": {**stored["parallel"], "layout": "dpp"}})


def test_plain_reader_upgrades_a_renamed_key():
    stored = json.loads(json.dumps(to_dict(compose_config(["batch.global_batch=8"]))))
    old = {**stored, "batch": {("global" if k == "global_batch" else k): v for k, v in stored["batch"].items()}}
    assert from_dict(old).batch.global_batch == 8


@dataclasses.dataclass
class _Made:
    args: tuple
    kwargs: dict


def _make(*args, **kwargs):
    return _Made(args, kwargs)


def test_instantiate_calls_targets_as_hydra_does():
    here = f"{__name__}._make"
    built = instantiate({"_target_": here, "_args_": [1], "inner": {"_target_": here, "x": 2}, "plain": {"y": [3]}})
    assert built == _Made((1,), {"inner": _Made((), {"x": 2}), "plain": {"y": [3]}})
    part = instantiate({"_target_": here, "a": 1}, partial=True)
    assert isinstance(part, functools.partial) and part(b=2) == _Made((), {"a": 1, "b": 2})
    kept = instantiate({"_target_": here, "_recursive_": False, "inner": {"_target_": here}})
    assert kept.kwargs == {"inner": {"_target_": here}}
    with pytest.raises(ConfigError, match=r"^model._target_='tests.nope.f' does not import"):
        instantiate({"_target_": "tests.nope.f"}, key="model._target_")
