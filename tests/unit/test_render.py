"""Rendered sbatch scripts: golden files (set UPDATE_GOLDEN=1 to rewrite them after a
deliberate change), and properties every script must have."""

from __future__ import annotations

import dataclasses
import difflib
import os
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from launcher.config.compose import compose_config
from launcher.slurm.render import ENV_REFERENCE
from launcher.slurm.submit import job_requests
from launcher.trials.spec import sweep_trials
from tests.support.render_cases import CASES, SWEEP_DIR, scripts

GOLDEN = Path(__file__).parents[1] / "golden"


@pytest.mark.parametrize("name", sorted(CASES))
def test_script_matches_golden_file(name):
    text = "".join(f"### {req.description}\n{script}" for req, script in scripts(name))
    path = GOLDEN / f"{name}.sbatch"
    if os.environ.get("UPDATE_GOLDEN"):
        path.write_text(text)
    expected = path.read_text()
    if text != expected:
        diff = "".join(difflib.unified_diff(expected.splitlines(True), text.splitlines(True), str(path), "rendered"))
        pytest.fail(f"rendered script differs from {path.name} (UPDATE_GOLDEN=1 to accept):\n{diff}")


def test_gres_only_when_gpus_are_asked_for():
    ((_, cpu),) = scripts("devcluster_2nodes")
    ((_, gpu),) = scripts("gpu_torchrun_all_options")
    assert "--gres" not in cpu
    assert "#SBATCH --gres=gpu:2\n" in gpu


@pytest.mark.parametrize("name", sorted(CASES))
def test_every_srun_step_names_its_cpus(name):
    """srun 22.05 does not take --cpus-per-task from the allocation: each step names it, and a
    torchrun task per node holds the CPUs of every rank it spawns."""
    for req, script in scripts(name):
        lines = script.replace("\\\n", " ").splitlines()
        steps = [line for line in lines if " srun --" in f" {line.strip()}"]
        assert all(" --cpus-per-task=" in step for step in steps)  # a command's link probe too: per rank
        (run,) = [line for line in lines if line.endswith("|| rc=$?")]
        per_task = req.cpus_per_task * (req.ntasks_per_node if req.launch == "torchrun" else 1)
        assert f" --cpus-per-task={per_task} " in run or (req.payload.command and req.launch == "none")


def test_rendezvous_from_nodelist_and_job_id():
    ((_, script),) = scripts("devcluster_2nodes")
    assert 'HOSTS=($(scontrol show hostnames "$SLURM_JOB_NODELIST"))' in script
    assert 'export MASTER_ADDR="${HOSTS[0]}"' in script
    assert 'export MASTER_PORT="$(( 20000 + (SLURM_JOB_ID + index) % 12000 ))"' in script
    assert "29500" not in script


def test_per_attempt_logs_and_time_limit_warning():
    ((_, script),) = scripts("devcluster_2nodes")
    assert '--output="$dir/rank%t.attempt$ATTEMPT.log"' in script
    assert 'ATTEMPT="${SLURM_RESTART_COUNT:-0}"' in script
    assert "#SBATCH --open-mode=append\n" in script  # a requeued job appends to its batch log
    assert "#SBATCH --signal=USR1@60\n" in script


def test_usr1_before_the_limit_reaches_only_a_payload_that_asks_for_it():
    """A command that does not handle USR1 would die of its default action 60 s before the limit and read
    `failed`; without the warning Slurm stops it at the limit and the row reads `timeout` (job.signal)."""
    ((_, builtin),) = scripts("devcluster_2nodes")
    ((_, command),) = scripts("command_srun_gpus")
    ((_, asking),) = scripts("command_srun_gpus", extra=["job.signal=true", "cluster.signal_warning_s=300"])
    assert "#SBATCH --signal=USR1@60\n" in builtin
    assert "--signal" not in command
    assert "#SBATCH --signal=USR1@300\n" in asking


def test_setup_lines_run_verbatim_before_strict_mode():
    ((_, script),) = scripts("gpu_torchrun_all_options")
    setup = script.index("source $(conda info --base)/etc/profile.d/conda.sh\nconda activate train\n")
    assert setup < script.index("set -euo pipefail")


def test_values_in_the_body_are_shell_quoted():
    ((_, script),) = scripts("quoted_payload_args")
    assert shlex.quote("/scratch/it's here/$(params).pt") in script
    # The trial folder is a quoted word of a bash array.
    assert f"TRIAL_DIRS=( {shlex.quote(str(SWEEP_DIR / 'trials' / '000-ws1'))} )" in script


def test_array_and_pack_shapes():
    # The repeats of a size are one array, sweep.array_throttle (2 here) of them at once.
    ((req, script),) = scripts("repeats_three_rounds")
    assert req.array and req.array_throttle == 2 and "#SBATCH --array=0-2%2\n" in script
    assert "slurm-%A_%a.out" in script and "--dependency" not in script
    # Where jobs run one at a time (serialize_trials) no throttle could interleave sizes: one plain job per round.
    jobs = scripts("repeats_serialized_rounds")
    assert len(jobs) == 3 and not any(req.array or "--array" in script for req, script in jobs)
    # There, two combinations of one size in one round share an array, one task at a time.
    cfg = compose_config(CASES["repeats_serialized_rounds"])
    a = sweep_trials(cfg, variant="a")
    b = sweep_trials(cfg, first_index=len(a), variant="b")
    (job, *_) = job_requests(cfg, SWEEP_DIR, a + b)
    assert [t.trial_id for t in job.trials] == ["000-a-ws2-r0", "003-b-ws2-r0"]
    script = job.script
    assert job.request.array and "#SBATCH --array=0-1%1\n" in script and "slurm-%A_%a.out" in script  # %1: serialised
    ((req, script),) = scripts("pack_1_2_4")
    assert req.pack and req.nodes == 4 and "--array" not in script
    assert [ln.split()[2:] for ln in script.splitlines() if ln.startswith("run_trial ")] == [
        ["1", "0"],
        ["2", "1"],
        ["4", "2"],
    ]


def test_run_dry_run_prints_and_writes_the_script_and_submits_nothing(tmp_path, capsys):
    from launcher.cli import main

    assert (
        main(
            [
                "run",
                "cluster=devcluster",
                "cluster.nodes=2",
                f"sweep.results_dir={tmp_path}",
                "sweep.name=dry",
                "--dry-run",
            ]
        )
        == 0
    )
    out, err = capsys.readouterr()
    script = tmp_path / "dry" / "jobs" / "job-000.sbatch"
    assert out == script.read_text()
    assert out.startswith("#!/bin/bash\n") and "#SBATCH --nodes=2\n" in out
    assert f"submit with: sbatch {script}" in err
    assert (tmp_path / "dry" / "trials" / "000-ws2" / "trial.json").exists()
    assert not list(tmp_path.glob("dry/trials/*/submission.json"))


# --- the interpreter on the nodes, and cluster.env references -----------------------------------


def _srun_python(script: str) -> str:
    words = [w for w in shlex.split(script, comments=True) if w != "\n"]
    return words[words.index("-m") - 1]


@pytest.mark.parametrize("name", ["site_setup_srun", "site_setup_torchrun"])
def test_setup_lines_without_cluster_python_run_python_from_path(name):
    """After setup lines (module load, activation) the job runs the `python` they put on PATH, for
    srun and torchrun launch alike; never the submitting machine's interpreter."""
    ((_, script),) = scripts(name)
    assert _srun_python(script) == "python"
    assert sys.executable not in script
    assert script.index("source /opt/venvs/train/bin/activate\n") < script.index(" python -m ")
    if name.endswith("torchrun"):
        assert " python -m torch.distributed.run " in script


def test_cluster_python_wins_over_setup_and_no_setup_keeps_the_submitting_interpreter():
    ((_, script),) = scripts("gpu_torchrun_all_options")  # setup lines and cluster.python
    assert _srun_python(script) == "/opt/venv/bin/python"
    cfg = compose_config(["cluster=devcluster", "sweep.nodes=[1]"])  # no setup, no cluster.python
    (job,) = job_requests(cfg, SWEEP_DIR, sweep_trials(cfg))
    assert _srun_python(job.script) == sys.executable


def test_env_reference_renders_as_a_quoted_expansion():
    ((_, script),) = scripts("site_setup_srun")
    assert 'export PATH=/opt/x/bin:"${PATH-}"\n' in script
    assert 'export LD_LIBRARY_PATH=/opt/x/lib:"${LD_LIBRARY_PATH-}"\n' in script
    assert "export NOTE='$HOME `id` $(id) *'\n" in script
    # The exports come after the setup lines: ${PATH} is the PATH they left.
    assert script.index("source /opt/venvs/train/bin/activate\n") < script.index("export PATH=")


ENV_VALUES = [
    "PATH=/opt/x/bin:${PATH}",
    "A=$(touch {c})${HOME}",
    "B=`touch {c}`:${UNSET_VARIABLE_XYZ}:",
    "C=$HOME ${HOME $((1+1)) ${HOME",
    "D=${HOME:-x}${HOME:+$(touch {c})}${!HOME}${HOME[0]}${1}${ HOME}${HOME-}$${HOME}",
    "E=*",
    "F=~/x:~:a=~",
    'G=it\'s "${HOME}" \\${HOME}\\',
    "H=${A}|${B}",
    "I=x;touch {c};${HOME}|touch {c}&",
    "J=line1\nline2 ${HOME}\r",
    "K=",
    "L=${HOME}",
    "M=${IFS}touch${IFS}{c}",
]


def _expanded(items: list[str], env: dict[str, str]) -> dict[str, str]:
    """What each exported variable must hold: ${NAME} replaced by its value (earlier exports
    included; unset → empty), every other character as written."""
    known, out = dict(env), {}
    for item in items:
        name, _, value = item.partition("=")
        out[name] = known[name] = ENV_REFERENCE.sub(lambda m: known.get(m.group(1), ""), value)
    return out


def test_env_export_lines_run_under_bash_expand_only_references(tmp_path):
    """The rendered export lines, run by bash under the script's strict mode: each `${NAME}` is
    expanded when the job runs, nothing else is (the canary file is never created)."""
    canary = tmp_path / "CANARY"
    items = [v.replace("{c}", str(canary)) for v in ENV_VALUES]
    cfg = compose_config(["cluster=devcluster", "sweep.nodes=[1]"])
    cfg = dataclasses.replace(cfg, cluster=dataclasses.replace(cfg.cluster, env=items))
    (job,) = job_requests(cfg, SWEEP_DIR, sweep_trials(cfg))
    exports = [ln for ln in job.script.split("\n") if ln.startswith("export ") and "OMP_NUM_THREADS" not in ln]
    # A value with a line break spans lines: take the exports block as written.
    start = job.script.index(exports[0])
    block = job.script[start : job.script.index("\n\n", start)]
    (tmp_path / "exports.sh").write_text(f'set -euo pipefail\n{block}\nenv -0 > "$OUT"\n')
    env = {"PATH": "/usr/bin:/bin", "HOME": str(tmp_path), "OUT": str(tmp_path / "env"), "LANG": "C.UTF-8"}
    proc = subprocess.run(
        ["bash", str(tmp_path / "exports.sh")],
        env=env,
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    got = dict(p.split("=", 1) for p in (tmp_path / "env").read_bytes().decode().split("\0")[:-1])
    want = _expanded(items, {**env, "IFS": " \t\n"})
    assert {k: got.get(k) for k in want} == want
    assert want["PATH"] == "/opt/x/bin:/usr/bin:/bin" and want["L"] == str(tmp_path)
    assert not canary.exists(), "an env value ran as shell code"
