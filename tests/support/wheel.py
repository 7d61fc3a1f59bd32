"""The launcher's wheel, built from a copy of this checkout's sources (the build writes build/ and *.egg-info beside
them): what `pip install .` installs, for the install tests and the torch-floor resolver test."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
SOURCES = ("pyproject.toml", "README.md", "launcher", "recipes", "sbatch_templates")


def build_wheel(src: Path, out: Path) -> Path:
    """Copy SOURCES into `src`, build the wheel into `out` (no deps, no isolation: offline), return it."""
    for name in SOURCES:
        if (REPO / name).is_dir():
            shutil.copytree(REPO / name, src / name, ignore=shutil.ignore_patterns("__pycache__"))
        else:
            shutil.copy2(REPO / name, src / name)
    build = [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q", "-w", str(out), str(src)]
    proc = subprocess.run(build, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    (built,) = out.glob("launcher-*.whl")
    return built
