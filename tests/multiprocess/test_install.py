"""Installed as people install it: a wheel (what `pip install .` builds) carries every module, the
bundled recipes and the sbatch template, and the installed package runs from any folder, not only
from this checkout. The editable install (`pip install -e .`) is what every other test runs on."""

from __future__ import annotations

import subprocess
import sys
import sysconfig
import zipfile
from pathlib import Path

import pytest

from launcher.config.compose import PACKAGED_RECIPES
from launcher.slurm.render import TEMPLATES
from tests.support.wheel import REPO, build_wheel


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> Path:
    """A wheel built as `pip wheel .` builds it, from a copy of the sources (tests/support/wheel.py)."""
    return build_wheel(tmp_path_factory.mktemp("src"), tmp_path_factory.mktemp("wheel"))


@pytest.fixture(scope="module")
def installed(wheel, tmp_path_factory) -> Path:
    """The wheel installed into a folder of its own (`pip install --target`)."""
    target = tmp_path_factory.mktemp("target")
    proc = subprocess.run(
        [sys.executable, "-m", "pip", "install", "--no-deps", "-q", "--target", str(target), str(wheel)],
        capture_output=True,
        text=True,
    )
    assert proc.returncode == 0, proc.stderr
    return target


def launcher_from(target: Path, cwd: Path, *argv: str) -> subprocess.CompletedProcess:
    """`python -m launcher ARGV` in `cwd` on the installed copy: -S skips site-packages' .pth files,
    so this checkout's editable install cannot answer; the dependencies come from the venv."""
    path = f"{target}:{sysconfig.get_paths()['purelib']}:{sysconfig.get_paths()['platlib']}"
    return subprocess.run(
        [sys.executable, "-S", "-m", "launcher", *argv],
        cwd=cwd,
        capture_output=True,
        text=True,
        env={"PATH": "/usr/bin:/bin", "PYTHONPATH": path, "HOME": str(cwd)},
    )


def test_the_wheel_carries_every_module_recipe_and_template(wheel):
    names = set(zipfile.ZipFile(wheel).namelist())
    wanted = {f"launcher/{p.relative_to(REPO / 'launcher')}" for p in (REPO / "launcher").rglob("*.py")}
    wanted |= {f"launcher/recipes/{p.relative_to(REPO / 'recipes')}" for p in (REPO / "recipes").rglob("*.yaml")}
    wanted |= {f"launcher/sbatch_templates/{p.name}" for p in (REPO / "sbatch_templates").glob("*.j2")}
    assert "launcher/recipes/config.yaml" in wanted and "launcher/sbatch_templates/trial.sbatch.j2" in wanted
    assert wanted - names == set(), "missing from the wheel: list new subpackages in pyproject.toml [tool.setuptools]"


def test_editable_install_reads_the_top_level_folders():
    """No second copy: in this checkout the recipes and templates read are the ones users edit."""
    assert PACKAGED_RECIPES == REPO / "recipes" and TEMPLATES == REPO / "sbatch_templates"


def test_installed_package_finds_its_recipes_and_renders_from_any_folder(installed, tmp_path):
    info = launcher_from(installed, tmp_path, "--info")
    assert info.returncode == 0, info.stderr
    assert info.stdout.startswith(f"Config groups in {installed / 'launcher' / 'recipes'} ")
    dry = launcher_from(installed, tmp_path, "run", "--dry-run", "cluster=slurm")
    assert dry.returncode == 0, dry.stderr
    assert dry.stdout.startswith("#!/bin/bash\n") and "#SBATCH --nodes=1\n" in dry.stdout
    assert list(tmp_path.glob("results/*/jobs/job-000.sbatch"))


@pytest.mark.torch_dist
def test_installed_package_runs_a_sweep_from_any_folder(installed, tmp_path):
    results = tmp_path / "results"
    proc = launcher_from(
        installed,
        tmp_path,
        "sweep",
        "sweep.world_sizes=[1]",
        "sweep.steps=4",
        "sweep.warmup_steps=1",
        f"sweep.results_dir={results}",
        "sweep.name=installed",
        "--quiet",
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "Recommended world size: 1" in proc.stdout
    assert (results / "installed" / "results.csv").is_file()
