"""One executor interface, chosen once: executor_for maps each cluster kind to its executor, the
traits table gives the layers below what each kind means, no other module branches on the kind,
and a payload other than the built-in trainer runs through both executors unchanged."""

from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest

from launcher.config.cluster_traits import TRAITS, cluster_traits, recorded_traits
from launcher.config.compose import compose_config
from launcher.config.errors import ConfigError
from launcher.config.schema import ClusterKind, Launch
from launcher.run.executor import EXECUTORS, executor_for
from launcher.run.executor.local import LocalExecutor
from launcher.run.executor.slurm import SlurmExecutor
from launcher.run.local import run_local
from launcher.run.sweep import create_sweep_dir
from launcher.slurm.render import job_request, render_script
from launcher.trials.payload import PYTHON, Payload, TrialFile, builtin_payload, payload_for
from launcher.trials.spec import sweep_trials

PACKAGE = Path(__file__).resolve().parents[2] / "launcher"
CHOICE = "run/executor/__init__.py"  # executor_for: the one place that reads the kind to choose
SCHEMA = "config/cluster_schema.py"  # its field docs name the kind

# --- the choice ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("overrides", "cls", "name"),
    [
        ([], LocalExecutor, "local"),
        (["cluster=devcluster"], SlurmExecutor, "slurm"),
        (["cluster=slurm"], SlurmExecutor, "slurm"),
    ],
)
def test_executor_for_each_kind(overrides, cls, name):
    cfg = compose_config(overrides)
    executor = executor_for(cfg)
    assert type(executor) is cls and executor.name == name and executor.cfg is cfg


def test_every_kind_has_an_executor_and_a_traits_row():
    assert set(EXECUTORS) == set(ClusterKind) == set(TRAITS)


def test_an_unknown_kind_never_reaches_the_choice():
    with pytest.raises(ConfigError, match="cluster.kind"):
        compose_config(["cluster.kind=pbs"])


def test_traits_of_each_kind():
    assert cluster_traits(compose_config([]).cluster) == TRAITS["local"]
    assert (TRAITS["local"].ranks_here, TRAITS["local"].batch_jobs) == (True, False)
    assert (TRAITS["slurm"].ranks_here, TRAITS["slurm"].batch_jobs) == (False, True)
    assert recorded_traits({"kind": "local"}) == TRAITS["local"] and recorded_traits({}) is None


def test_local_executor_refuses_detach(tmp_path):
    executor = executor_for(compose_config([f"sweep.results_dir={tmp_path}"]))
    with pytest.raises(ConfigError, match=r"^--detach needs a Slurm cluster \(cluster=slurm or cluster=devcluster\)"):
        executor.check_detach()


# --- no branch on the kind elsewhere ---------------------------------------------------------------

# `X.kind ==`, `X.kind != `, `X.kind in`, `get("kind") ==`, a kind literal compared with `kind`, or a
# ClusterKind member named outside the tables. `d.kind` / `data.kind` (the data source) and `p.kind`
# (a parameter's kind) are not the cluster's.
_BRANCH = re.compile(
    r"(?P<obj>[\w.]+)\.kind\s*(==|!=|\bin\b|\bis\b)"
    r"|get\(\s*['\"]kind['\"]\s*\)\s*(==|!=)\s*['\"](local|slurm)['\"]"
    r"|\bkind\s*(==|!=)\s*['\"](local|slurm)['\"]"
    r"|ClusterKind\.(local|slurm)"
)
_DATA = {"d", "data", "cfg.data", "p", "job", "cfg.job", "self.cfg.job"}  # p: an inspect.Parameter (byo_check reads a
# forward's signature); job.kind: what a trial runs (builtin | command), not where
_TABLES = {CHOICE, SCHEMA, "config/cluster_traits.py"}  # where a ClusterKind member keys a table


def kind_branches(text: str, *, tables_allowed: bool = False) -> list[str]:
    """Lines of `text` that branch on a cluster kind (or read it to choose), stripped."""
    out = []
    for line in text.splitlines():
        for m in _BRANCH.finditer(line):
            if m["obj"] in _DATA or (tables_allowed and m.group(0).startswith("ClusterKind.")):
                continue
            out.append(line.strip())
            break
    return out


def test_the_kind_scanner_catches_each_style_of_branch():
    assert kind_branches('if cfg.cluster.kind == "slurm":') == ['if cfg.cluster.kind == "slurm":']
    assert kind_branches("local = c.kind != 'local'")
    assert kind_branches("if c.kind in (ClusterKind.slurm,):")
    assert kind_branches('x = (cfg.get("cluster") or {}).get("kind") == "local"')
    assert kind_branches('def f(kind): return kind == "slurm"')
    assert kind_branches("if k is ClusterKind.local:")
    assert kind_branches('if d.kind == "file" and data.kind != "dataset":') == []
    assert kind_branches('if q.get("kind") == "tbf":') == []  # a tc qdisc's kind
    assert kind_branches("TABLE = {ClusterKind.local: 1}", tables_allowed=True) == []


def test_only_the_executor_choice_and_the_schema_name_cluster_kind():
    """As `grep -rn "cluster.kind" launcher/` matches (its `.` any character: "cluster kind" too)."""
    hits = {str(p.relative_to(PACKAGE)) for p in PACKAGE.rglob("*.py") if re.search("cluster.kind", p.read_text())}
    assert hits <= {CHOICE, SCHEMA}, hits
    assert CHOICE in hits


def test_no_module_branches_on_the_cluster_kind():
    found = {}
    for p in sorted(PACKAGE.rglob("*.py")):
        rel = str(p.relative_to(PACKAGE))
        if rel == CHOICE:
            continue  # the dict lookup that chooses is the one allowed read
        lines = kind_branches(p.read_text(), tables_allowed=rel in _TABLES)
        if lines:
            found[rel] = lines
    assert found == {}


# --- the payload seam: a second payload through both executors, no new branch ---------------------


def test_builtin_payload_spelled_here():
    argv = builtin_payload(extra_args=("--save-params", "p t")).here(Path("/t"), "/py")
    assert argv == ["/py", "-m", "launcher.train", "--trial", "/t/trial.json", "--record", "/t/record.json"] + [
        "--save-params",
        "p t",
    ]
    assert payload_for(compose_config(["cluster=devcluster", "cluster.launch=torchrun"])).launch == "torchrun"


def test_payload_words_are_checked():
    with pytest.raises(ValueError, match=r"TrialFile\(name='\.\./x'\)"):
        TrialFile(name="../x")
    with pytest.raises(ValueError, match="payload env name 'A B'"):
        Payload(argv=("x",), env=(("A B", "1"),))
    with pytest.raises(ValueError, match="argv is empty"):
        Payload(argv=())


OTHER = Payload(
    argv=(PYTHON, "train.py", "--out", TrialFile(name="out.txt"), "it's"),
    env=(("GREETING", "hi $(there)"),),
    launch=Launch.srun,
)


@pytest.mark.parametrize("launch", ["srun", "torchrun"])
def test_another_payload_in_a_job_script(launch):
    cfg = compose_config(["cluster=devcluster", "sweep.nodes=[1]", "cluster.python=/opt/py"])
    (trial,) = sweep_trials(cfg)
    payload = Payload(argv=OTHER.argv, env=OTHER.env, launch=launch)
    request = job_request(
        cfg.cluster,
        [trial],
        [Path("/s/trials/x")],
        job_name="j",
        log_dir=Path("/s/jobs"),
        python="/py",
        payload=payload,
    )
    script = render_script(request)
    assert "export GREETING='hi $(there)'\n" in script
    words = "train.py --out \"$dir/out.txt\" 'it'\"'\"'s' || rc=$?"
    if launch == "srun":
        assert f"        /opt/py {words}\n" in script
    else:
        assert f'--rdzv-id="$SLURM_JOB_ID-$index" \\\n        {words}\n' in script
    assert "launcher.train" not in script


def test_another_payload_through_the_local_ranks(tmp_path):
    cfg = compose_config([f"sweep.results_dir={tmp_path}", "sweep.name=s", "sweep.world_sizes=[2]"])
    (trial,) = sweep_trials(cfg)
    tdir = create_sweep_dir(cfg, [(trial, cfg)], []) / "trials" / trial.trial_id
    code = "import os, sys; open(sys.argv[1] + os.environ['RANK'], 'w').write(os.environ['GREETING'] + sys.executable)"
    payload = Payload(argv=(PYTHON, "-c", code, TrialFile(name="hello")), env=(("GREETING", "hi"),))
    out = run_local(tdir, world_size=2, threads=1, timeout_s=60, payload=payload)
    assert out.ok, out.reason()
    assert [(tdir / f"hello{r}").read_text() for r in (0, 1)] == [f"hi{sys.executable}"] * 2  # PYTHON: this one


def test_a_resumed_pack_whose_job_went_out_submits_nothing(tmp_path, monkeypatch):
    """`sweep --resume` of a packed sweep still running: every trial is submitted, so no job is
    rendered (a pack of no trials used to stop the resume with "a job needs at least one trial")."""
    cfg = compose_config(
        ["cluster=devcluster", "sweep.nodes=[1,2]", "sweep.pack=true", f"sweep.results_dir={tmp_path}"]
    )
    trials = sweep_trials(cfg)
    sweep_dir = create_sweep_dir(cfg, [(t, cfg) for t in trials], [])
    monkeypatch.setattr("launcher.slurm.submit.sbatch", lambda script, env: "41")
    executor_for(cfg).submit_detached(sweep_dir, trials)
    monkeypatch.setattr("launcher.slurm.submit.sbatch", lambda script, env: pytest.fail("submitted twice"))
    executor_for(cfg).submit_detached(sweep_dir, trials)
    assert sorted(p.name for p in (sweep_dir / "jobs").iterdir()) == ["job-000.sbatch", "job-000.submitted.json"]


def test_a_submitted_job_is_one_whole_line_in_a_log(tmp_path, monkeypatch, capsys):
    """Where stderr is not a terminal (a script, a log), each submitted job is one line as it is: no rich
    (its ~40 ms of imports are a fifth of a --detach start-up, issue 30 item 11; run/say.py), so no wrapping
    at 80 columns either, which cut the array line of a 256-trial sweep in two."""
    cfg = compose_config(
        [
            "cluster=devcluster",
            "cluster.serialize_trials=false",
            "sweep.nodes=[1]",
            "sweep.repeats=64",
            f"sweep.results_dir={tmp_path}",
        ]
    )
    trials = sweep_trials(cfg)
    sweep_dir = create_sweep_dir(cfg, [(t, cfg) for t in trials], [])
    capsys.readouterr()
    monkeypatch.setattr("launcher.slurm.submit.sbatch", lambda script, env: "41")
    executor_for(cfg).submit_detached(sweep_dir, trials)
    assert capsys.readouterr().err == (
        "submitted job-000 as job 41: array of 64 (000-ws1-r0, 001-ws1-r1, …, 063-ws1-r63, 4 at a time)\n"
    )
