"""A site launch on the real dev cluster does what the site file says: a site recipe whose setup
lines put a `python` first on PATH, `module`-style (a stand-in `module` shell function) and
conda-style (a sourced `activate` script), for srun and torchrun launch. That `python` is a
wrapper that leaves a marker file and execs the real interpreter, so the marker proves the job ran
the python found on PATH after setup (no cluster.python is set). The site's `cluster.env` prepends
to `${PATH}`, which must expand in the job to the PATH the setup lines left."""

from __future__ import annotations

import json
import re
import shutil
import sys
from pathlib import Path

import pytest

from launcher.config.compose import PACKAGED_RECIPES
from launcher.io import read_json
from tests.support.cli import launch_printed

pytestmark = pytest.mark.slurm


SITE_BIN = "/nonexistent/site/bin"  # cluster.env prepends it: proves ${PATH} expanded in the job


MODULE_SH = """# A stand-in for Environment Modules / Lmod: a shell function that edits the calling shell.
module() {
    if [ "$1" = load ] && [ "$2" = fakepy ]; then export PATH="ROOT/modules/fakepy/bin:$PATH"; fi
}
"""


ACTIVATE = """# A stand-in for a conda or venv activate script (sourced).
export CONDA_PREFIX="ROOT/conda/envs/train"
export PATH="$CONDA_PREFIX/bin:$PATH"
"""


WRAPPER = """#!/bin/sh
# The `python` a setup line put on PATH: leave a marker, then run the real interpreter.
m=$(mktemp "ROOT/markers/STYLE.XXXXXX")
printf '%s\\n' "$PATH" "$*" > "$m"
exec REAL "$@"
"""


SETUP = {
    "module": ["source ROOT/modules.sh", "module load fakepy"],
    "conda": ["source ROOT/conda/envs/train/bin/activate"],
}


BIN = {"module": "modules/fakepy/bin", "conda": "conda/envs/train/bin"}


def _yaml_string(value: str) -> str:
    """A YAML double-quoted scalar with OmegaConf's `${` escaped (it is for bash, at job time)."""
    return json.dumps(value.replace("${", "\\${"))


def _site(root: Path, style: str) -> Path:
    """A recipes folder holding cluster/fakesite.yaml (the dev cluster plus `style` setup lines),
    the fake module/activate scripts and the marker-leaving python wrapper."""
    recipes = root / "recipes"
    shutil.copytree(PACKAGED_RECIPES, recipes)
    (root / "markers").mkdir()
    (root / "modules.sh").write_text(MODULE_SH.replace("ROOT", str(root)))
    activate = root / "conda/envs/train/bin/activate"
    activate.parent.mkdir(parents=True)
    activate.write_text(ACTIVATE.replace("ROOT", str(root)))
    wrapper = root / BIN[style] / "python"
    wrapper.parent.mkdir(parents=True, exist_ok=True)
    wrapper.write_text(WRAPPER.replace("ROOT", str(root)).replace("STYLE", style).replace("REAL", sys.executable))
    wrapper.chmod(0o755)
    setup = [line.replace("ROOT", str(root)) for line in SETUP[style]]
    env = [f"PATH={SITE_BIN}:${{PATH}}", "NOTE=$(touch ROOT/CANARY) ${HOME}".replace("ROOT", str(root))]
    (recipes / "cluster" / "fakesite.yaml").write_text(
        "defaults:\n  - devcluster\n"
        f"setup: [{', '.join(map(_yaml_string, setup))}]\n"
        f"env: [{', '.join(map(_yaml_string, env))}]\n"
    )
    return recipes


@pytest.mark.parametrize("launch", ["srun", "torchrun"])
@pytest.mark.parametrize("style", ["module", "conda"])
def test_setup_lines_choose_the_python_on_path(style, launch, devcluster, tmp_path):
    recipes = _site(tmp_path, style)
    name = f"site-{style}-{launch}"
    rc, out = launch_printed(
        [
            "run",
            "--recipes",
            str(recipes),
            "cluster=fakesite",
            f"cluster.launch={launch}",
            "cluster.nodes=1",
            "run.steps=4",
            "run.warmup_steps=1",
            f"sweep.results_dir={tmp_path / 'r'}",
            f"sweep.name={name}",
            "--quiet",
        ]
    )
    sweep_dir = tmp_path / "r" / name
    tdir = sweep_dir / "trials" / "000-ws1"
    assert rc == 0, out + "".join(p.read_text() for p in sorted(tdir.glob("*.log")))
    assert read_json(tdir / "record.json")["status"] == "completed"
    script = (sweep_dir / "jobs" / "job-000.sbatch").read_text()
    assert " python -m " in script and sys.executable not in script  # no cluster.python: PATH decides

    markers = sorted((tmp_path / "markers").iterdir())
    assert markers and all(m.name.startswith(f"{style}.") for m in markers)
    for m in markers:
        path, args = m.read_text().splitlines()
        # The job's PATH: cluster.env's prefix, then the setup line's bin, then the rest of it.
        assert path.startswith(f"{SITE_BIN}:{tmp_path / BIN[style]}:"), path
        assert ("-m torch.distributed.run" if launch == "torchrun" else "-m launcher.train") in args
    assert not (tmp_path / "CANARY").exists()  # `$(touch …)` in cluster.env stayed data

    # `launcher run` says what happened: its figures and where its logs are, not a sweep table.
    assert "Recommended world size" not in out
    assert f"run {name}: completed" in out and re.search(r"^  steps +4 \(3 measured after 1 warm-up\)$", out, re.M)
    log = "rank0.attempt0.log" if launch == "srun" else "node0.attempt0.log"
    assert f"logs: {tdir}/ " in out and log in out and (tdir / log).exists()
    assert re.search(rf"^batch log: {re.escape(str(sweep_dir))}/jobs/slurm-\d+\.out$", out, re.M)
