"""pyxis/enroot containers: cluster.container_image and cluster.container_mounts reach the payload's
srun (srun and torchrun launch) as shell-quoted words, and a bad mount is refused with one line.
The golden files container_srun/container_torchrun hold the whole scripts; the hostile-input corpus
(test_hostile_input.py) the quoting."""

from __future__ import annotations

import shlex

import pytest

from launcher.cli import main
from tests.support.render_cases import scripts

IMAGE = "nvcr.io#nvidia/pytorch:24.05-py3"
MOUNTS = ["/scratch/results:/scratch/results", "/datasets/my sets:/data:ro+rprivate"]


def _srun_words(script: str) -> list[str]:
    """The words of the payload's srun line (continuations joined), as bash splits them."""
    joined = script.replace("\\\n", " ")
    (line,) = [ln for ln in joined.splitlines() if ln.strip().startswith("srun ")]
    return shlex.split(line)


@pytest.mark.parametrize("name, runs", [("container_srun", "launcher.train"), ("container_torchrun", "torchrun")])
def test_container_options_are_srun_words_before_the_payload(name, runs):
    (_, script), *_ = scripts(name)
    words = _srun_words(script)
    image = words.index(f"--container-image={IMAGE}")
    assert words[image + 1] == "--container-mounts=" + ",".join(MOUNTS)
    # srun options, so before what srun runs: the payload (srun launch) or torchrun's bash wrapper.
    assert image < words.index("launcher.train" if runs == "launcher.train" else "bash")
    assert "container" not in "".join(ln for ln in script.splitlines() if ln.startswith("#SBATCH"))


def test_no_container_no_options():
    (_, script), *_ = scripts("devcluster_2nodes")
    assert "--container" not in script


def test_run_dry_run_with_a_container_prints_it(tmp_path, capsys):
    rc = main(
        [
            "run",
            "cluster=devcluster",
            "cluster.nodes=2",
            f"cluster.container_image='{IMAGE}'",  # quoted for Hydra: '#' and ':'
            "cluster.container_mounts=['/scratch:/scratch']",
            f"sweep.results_dir={tmp_path}",
            "--dry-run",
        ]
    )
    out = capsys.readouterr().out
    assert rc == 0
    assert f"--container-image={shlex.quote(IMAGE)} --container-mounts=/scratch:/scratch \\\n" in out


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
