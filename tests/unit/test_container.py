"""Containers (pyxis/enroot, Apptainer): every step on a node runs in cluster.container_image with
the image's python3, the launcher's package mounted read-only and on PYTHONPATH, the sweep and
submit folders mounted, starting in the submit folder; a bad mount is refused with one line.
The golden files container_*/apptainer_* hold the whole scripts; the hostile-input corpus
(test_hostile_input.py) the quoting; tests/slurm/test_containers.py runs them in a real image."""

from __future__ import annotations

import re
import shlex
import sys
from pathlib import Path

import pytest

from launcher.cli import main
from launcher.slurm.container import LAUNCHER_MOUNT
from tests.support.render_cases import LAUNCHER_SRC, SUBMIT_DIR, SWEEP_DIR, scripts

IMAGE = "nvcr.io#nvidia/pytorch:24.05-py3"
USER_MOUNTS = ["/scratch/results:/scratch/results", "/datasets/my sets:/data:ro+rprivate"]
# The launcher's three first: its package (read-only, where PYTHONPATH looks), the submit folder, the sweep folder.
MOUNTS = [
    f"{LAUNCHER_SRC}:{LAUNCHER_MOUNT}/launcher:ro",
    f"{SUBMIT_DIR}:{SUBMIT_DIR}",
    f"{SWEEP_DIR}:{SWEEP_DIR}",
    *USER_MOUNTS,
]


def _srun_lines(script: str) -> list[list[str]]:
    """The words of each srun line (continuations joined), as bash splits them."""
    joined = script.replace("\\\n", " ")
    lines = [shlex.split(ln) for ln in joined.splitlines() if " srun " in f" {ln} " and not ln.lstrip().startswith("#")]
    return [words[words.index("srun") :] for words in lines if "srun" in words]


def _srun_words(script: str) -> list[str]:
    (words,) = _srun_lines(script)
    return words


@pytest.mark.parametrize("name, runs", [("container_srun", "launcher.train"), ("container_torchrun", "torchrun")])
def test_container_options_are_srun_words_before_the_payload(name, runs):
    (_, script), *_ = scripts(name)
    words = _srun_words(script)
    image = words.index(f"--container-image={IMAGE}")
    mounts, workdir = "--container-mounts=" + ",".join(MOUNTS), f"--container-workdir={SUBMIT_DIR}"
    assert words[image + 1 : image + 3] == [mounts, workdir]
    # srun options, so before what srun runs: the payload (srun launch) or torchrun's bash wrapper.
    assert image < words.index("launcher.train" if runs == "launcher.train" else "bash")
    assert "python3" in words and "/opt/venv/bin/python" not in script  # the image's interpreter
    # One container per job and node shared by its steps where asked (container_reuse), the job id expanded by bash.
    reuse = "--container-name=launcher_$SLURM_JOB_ID"
    assert (reuse in words) == (name == "container_torchrun")
    assert "container" not in "".join(ln for ln in script.splitlines() if ln.startswith("#SBATCH"))
    assert f'export PYTHONPATH={LAUNCHER_MOUNT}"${{PYTHONPATH:+:$PYTHONPATH}}"\n' in script


@pytest.mark.parametrize("name", ["container_command_torchrun", "container_command_srun"])
def test_every_step_of_a_command_trial_runs_in_the_image(name):
    (_, script), *_ = scripts(name)
    python = "/usr/bin/python3.12" if name.endswith("srun") else "python3"
    steps = _srun_lines(script)
    assert len(steps) == 3  # the link probe, the command, its record
    for words in steps:
        assert f"--container-image={IMAGE}" in words and f"--container-workdir={SUBMIT_DIR}" in words
    assert [words[words.index(python) + 2] for words in steps if python in words][::2] == [
        "launcher.train.link_probe",
        "launcher.train.command_record",
    ]
    # No interpreter of the submitting host is left anywhere in the script.
    assert "python -m" not in script and "/opt/venv/bin" not in script


@pytest.mark.parametrize("name", ["apptainer_srun", "apptainer_command_torchrun"])
def test_apptainer_exec_prefixes_every_step(name):
    (_, script), *_ = scripts(name)
    mounts = [m for m in MOUNTS if m not in USER_MOUNTS] + ["/datasets/my sets:/data:ro"]
    gpus = ["--nv"] if name == "apptainer_srun" else []  # that job asks for GPUs, the other none
    prefix = ["apptainer", "exec", *gpus, "--bind", ",".join(mounts), "--pwd", str(SUBMIT_DIR)]
    prefix += ["/images/pytorch-25.09.sif"]
    steps = _srun_lines(script)
    assert len(steps) == (1 if name == "apptainer_srun" else 3)
    for words in steps:
        at = words.index("apptainer")
        assert words[at : at + len(prefix)] == prefix
        assert not any(w.startswith("--container") for w in words)


def test_apptainer_refuses_pyxis_mount_flags(tmp_path, capsys):
    argv = ["sweep", "cluster=devcluster", "cluster.container_runtime=apptainer", "cluster.container_image=x.sif"]
    rc = main([*argv, "cluster.container_mounts=['/a:/b:ro+rprivate']", f"sweep.results_dir={tmp_path}/r"])
    err = capsys.readouterr().err
    assert rc == 2 and err.count("\n") == 1
    assert "flags 'ro+rprivate' are not Apptainer's bind options (ro or rw)" in err and not (tmp_path / "r").exists()


def test_no_container_no_options():
    (_, script), *_ = scripts("devcluster_2nodes")
    assert "--container" not in script


def _doc_recipes() -> list[str]:
    """The ```yaml blocks of docs/containers.md: the pyxis site recipe, then the Apptainer one."""
    text = (Path(__file__).parents[2] / "docs" / "containers.md").read_text()
    return re.findall(r"```yaml\n(.*?)```", text, flags=re.S)


@pytest.mark.parametrize("runtime", ["pyxis", "apptainer"])
def test_run_dry_run_of_a_command_in_the_docs_site_recipe(runtime, tmp_path, capsys, monkeypatch):
    """docs/containers.md: `launcher run --recipes my_recipes cluster=mysite job=my_train cluster.nodes=2
    --dry-run` with its own recipe, from the folder the user submits from."""
    recipes = tmp_path / "my_recipes"
    (recipes / "cluster").mkdir(parents=True)
    (recipes / "job").mkdir()
    (recipes / "cluster" / "mysite.yaml").write_text(_doc_recipes()[runtime == "apptainer"])
    (recipes / "job" / "my_train.yaml").write_text("defaults: [command]\nargv: [python, train.py]\n")
    monkeypatch.chdir(tmp_path)
    argv = ["run", "--recipes", "my_recipes", "cluster=mysite", "job=my_train", "cluster.nodes=2"]
    assert main([*argv, f"sweep.results_dir={tmp_path}/results", "--dry-run"]) == 0
    out = capsys.readouterr().out
    steps = _srun_lines(out)
    assert len(steps) == 3  # probe, command, record
    if runtime == "pyxis":
        assert all("--container-image=nvcr.io#nvidia/pytorch:25.09-py3" in w for w in steps)
        assert all(f"--container-workdir={tmp_path}" in w for w in steps)
        assert all(any(w.endswith(",/datasets:/datasets:ro") for w in words) for words in steps)
        assert all("--container-name=launcher_$SLURM_JOB_ID" in words for words in steps)  # the default
    else:
        for words in steps:
            at = words.index("apptainer")
            assert words[at + 1 : at + 3] == ["exec", "--bind"] and words[at + 4 : at + 7] == [
                "--pwd",
                str(tmp_path),
                "/shared/images/pytorch-25.09.sif",
            ]
    assert "JOB_ARGV=( python3 train.py )" in out and sys.executable not in out


@pytest.mark.parametrize(
    "overrides, said",
    [
        (["cluster.container_mounts=['/a:/b']"], "holds 1 mount(s) but cluster.container_image is null"),
        (["cluster.container_image=img.sqsh", "cluster.container_mounts=['/a:b']"], "src and dst must be absolute"),
        (["cluster.container_image=img.sqsh", "cluster.container_mounts=['/a']"], "1 ':'-separated part(s)"),
        (["cluster.container_image=img.sqsh", "cluster.container_mounts=['/a:/b:rw,ro']"], "',' separates mounts"),
        (["cluster.container_image=img.sqsh", "cluster.container_mounts=['/a:/b:RO']"], "flags 'RO' are not"),
        (["cluster.container_image=' '"], "cluster.container_image=' ' must be one image"),
    ],
    ids=["mounts_without_image", "relative_dst", "no_dst", "comma", "bad_flags", "blank_image"],
)
def test_bad_container_settings_are_one_line_exit_2(overrides, said, tmp_path, capsys):
    results = tmp_path / "results"
    argv = ["sweep", "cluster=devcluster", "cluster.slurm_conf=/nonexistent", f"sweep.results_dir={results}"]
    rc = main(argv + overrides)
    err = capsys.readouterr().err
    assert rc == 2 and len(err.splitlines()) == 1, err
    assert said in err
    assert not results.exists()


@pytest.mark.parametrize("reuse, requeue, named", [(False, False, False), (True, False, True), (False, True, True)])
def test_a_requeueable_job_names_its_container(reuse, requeue, named):
    """USR1 left an unnamed (squashfuse-mounted) container's files stale on the dev cluster before the ranks
    saved: a job that checkpoints on USR1 and requeues names its container whatever container_reuse says."""
    from launcher.config.compose import compose_config
    from launcher.slurm.container import container_for

    cluster = compose_config(
        ["cluster=devcluster", "cluster.container_image=x.sqsh", f"cluster.container_reuse={reuse}"]
    )
    where = {"submit_dir": SUBMIT_DIR, "sweep_dir": SWEEP_DIR, "launcher_src": LAUNCHER_SRC}
    c = container_for(cluster.cluster, **where, gpus=False, requeue=requeue)
    assert ('--container-name=launcher_"$SLURM_JOB_ID"' in c.words) == named
