"""The declared torch floor is the one the record proves, and pip keeps a site's torch.

- pyproject's `torch>=` floor, launcher.torch_compat.FLOOR and the floor run recorded by
  `python -m benchmarks.torch_compat` (benchmarks/results/torch_compat.json) are one version, and that
  record shows every listed test file passing on the floor torch and on the newest one.
- A venv that already holds torch at the floor keeps it through `pip install` of the launcher (the
  real wheel, built from this checkout, and pip's real resolver; offline, on stand-in wheels).
- torch_compat's rules answer per release as the torch sources they name do.
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import re
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
import tomllib
from packaging.requirements import Requirement
from packaging.version import Version

from benchmarks import torch_compat as bench
from launcher import torch_compat
from launcher.cli import main
from tests.support.wheel import build_wheel

ROOT = Path(__file__).resolve().parents[2]
RECORD = ROOT / "benchmarks" / "results" / "torch_compat.json"


def declared_floor() -> tuple[int, int]:
    """(major, minor) of pyproject's `torch>=X.Y`, the only torch specifier of the core dependencies."""
    deps = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"]
    (torch,) = [Requirement(d) for d in deps if Requirement(d).name == "torch"]
    (spec,) = torch.specifier
    assert spec.operator == ">=", f"pyproject declares torch{spec}: a floor (>=) keeps a site's torch, a pin does not"
    floor = Version(spec.version)
    return floor.major, floor.minor


def test_the_declared_floor_is_the_recorded_floor():
    """pyproject's floor, torch_compat.FLOOR and the record's floor run agree, and the floor is a year old at least
    (2.9 came out in October 2025): a site's torch that old is kept. Fails when one of the three moves alone."""
    record = json.loads(RECORD.read_text())
    assert torch_compat.FLOOR <= (2, 9)
    floor_run = next(run for run in record["runs"] if run["role"] == "floor")
    assert declared_floor() == torch_compat.FLOOR
    assert torch_compat.parse_version(floor_run["torch"])[:2] == torch_compat.FLOOR, floor_run["torch"]
    assert record["floor"] == "{}.{}".format(*torch_compat.FLOOR)


def test_the_record_shows_every_listed_file_passing_on_the_floor_and_the_newest_torch():
    record = json.loads(RECORD.read_text())
    assert sorted(run["role"] for run in record["runs"]) == ["floor", "newest"]
    assert record["files"] == list(bench.FILES), "the record predates the benchmark's file list: rerun it"
    for run in record["runs"]:
        assert run["torch_kept"] is True, f"pip replaced torch {run['torch']} in the {run['role']} venv"
        assert sorted(run["files"]) == sorted(bench.FILES)
        for name, counts in run["files"].items():
            assert counts["failed"] == counts["errors"] == 0, f"{run['role']} torch {run['torch']}: {name} {counts}"
            assert counts["passed"] > 0, f"{run['role']} torch {run['torch']}: {name} ran no test"
    newest, floor = (next(r for r in record["runs"] if r["role"] == role) for role in ("newest", "floor"))
    assert torch_compat.parse_version(newest["torch"]) > torch_compat.parse_version(floor["torch"])


# --- pip keeps the site's torch ----------------------------------------------------------------


def stub_wheel(folder: Path, name: str, version: str, files: dict[str, str] | None = None) -> Path:
    """A minimal real wheel (PEP 427) of distribution `name` at `version`: its metadata and `files`."""
    dist = re.sub(r"[-_.]+", "_", name).lower()
    info = f"{dist}-{version}.dist-info"
    contents = dict(files or {})
    contents[f"{info}/METADATA"] = f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n"
    contents[f"{info}/WHEEL"] = (
        "Wheel-Version: 1.0\nGenerator: test_torch_floor\nRoot-Is-Purelib: true\nTag: py3-none-any\n"
    )
    record = []
    for path, text in contents.items():
        digest = base64.urlsafe_b64encode(hashlib.sha256(text.encode()).digest()).rstrip(b"=").decode()
        record.append(f"{path},sha256={digest},{len(text.encode())}")
    contents[f"{info}/RECORD"] = "\n".join([*record, f"{info}/RECORD,,"]) + "\n"
    wheel = folder / f"{dist}-{version}-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w") as zf:
        for path, text in contents.items():
            zf.writestr(path, text)
    return wheel


def lowest_allowed(requirement: Requirement) -> str:
    """The lowest version a requirement's specifier names that it admits (1.0 when it names none)."""
    named = sorted(Version(s.version) for s in requirement.specifier)
    return str(next((v for v in named if requirement.specifier.contains(v)), Version("1.0")))


def pip(venv_python: Path, *args: str) -> subprocess.CompletedProcess:
    """This environment's pip acting on the venv of `venv_python` (pip --python), offline and deaf to
    the machine's pip configuration (a configured find-links or constraint would offer other wheels)."""
    argv = [sys.executable, "-m", "pip", "--python", str(venv_python), "--disable-pip-version-check"]
    env = {k: v for k, v in os.environ.items() if not k.startswith("PIP_")} | {"PIP_CONFIG_FILE": os.devnull}
    return subprocess.run([*argv, *args, "--no-index", "--no-cache-dir"], capture_output=True, text=True, env=env)


@pytest.fixture(scope="module")
def launcher_wheel(tmp_path_factory) -> Path:
    """The launcher's wheel built from this checkout: its metadata is what pip resolves against."""
    return build_wheel(tmp_path_factory.mktemp("src"), tmp_path_factory.mktemp("wheel"))


def site_venv(tmp_path: Path, launcher_wheel: Path, torch_version: str, offered: tuple[str, ...]) -> tuple[Path, Path]:
    """A venv (no pip of its own) holding a stand-in torch at `torch_version` and stand-ins of the
    launcher's other core dependencies at their lowest allowed versions; and a folder of wheels
    (those, and torch at each of `offered`) for pip to resolve from. (venv python, wheel folder)."""
    wheels = tmp_path / "wheels"
    wheels.mkdir()
    with zipfile.ZipFile(launcher_wheel) as zf:
        info = next(n for n in zf.namelist() if n.endswith(".dist-info/METADATA"))
        lines = zf.read(info).decode().splitlines()
    core = [r for r in (Requirement(line.split(":", 1)[1]) for line in lines if line.startswith("Requires-Dist:"))]
    core = [r for r in core if r.marker is None]  # an extra's requirements carry `extra == ...`
    assert "torch" in {r.name for r in core}
    torch_wheel = {"torch/__init__.py": f"__version__ = {torch_version!r}\n"}
    held = [stub_wheel(wheels, "torch", torch_version, torch_wheel)]
    held += [stub_wheel(wheels, r.name, lowest_allowed(r)) for r in core if r.name != "torch"]
    for version in offered:
        stub_wheel(wheels, "torch", version, {"torch/__init__.py": f"__version__ = {version!r}\n"})
    venv = tmp_path / "site"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    python = venv / "bin" / "python"
    proc = pip(python, "install", "-q", "--no-deps", "--no-compile", *map(str, held))
    assert proc.returncode == 0, proc.stderr
    return python, wheels


def test_pip_install_keeps_a_site_torch_at_the_floor(launcher_wheel, tmp_path):
    """A venv holding torch at the floor (a stand-in wheel named torch, version FLOOR.0), then
    `pip install` of the launcher's wheel with dependency resolution, offline, newer torches (2.13.0, 2.14.1,
    99.0) on offer: pip installs the launcher alone and torch stays as it was.

    Fails when the launcher's metadata asks for a newer torch than the floor: torch pinned in the
    core dependencies (`torch==2.13.0` there instead of in the `cpu` extra) or the floor raised
    (`torch>=2.13`) without FLOOR and the record following; pip then replaces the site's torch."""
    floor = "{}.{}.0".format(*torch_compat.FLOOR)
    python, wheels = site_venv(tmp_path, launcher_wheel, floor, offered=("2.13.0", "2.14.1", "99.0"))
    report = tmp_path / "report.json"
    proc = pip(
        python, "install", "--no-compile", "--find-links", str(wheels), "--report", str(report), str(launcher_wheel)
    )
    assert proc.returncode == 0, proc.stderr
    installed = {i["metadata"]["name"]: i["metadata"]["version"] for i in json.loads(report.read_text())["install"]}
    assert installed == {"launcher": "0.1.0"}, f"pip changed more than the launcher: {installed}"
    imported = subprocess.run(
        [str(python), "-c", "import torch; print(torch.__version__)"], capture_output=True, text=True
    )
    assert imported.stdout.strip() == floor, imported.stderr


def test_pip_install_refuses_a_site_torch_below_the_floor(launcher_wheel, tmp_path):
    """The floor binds: with torch one minor below it held and no other on offer, pip refuses to
    install the launcher, naming torch. Fails when the floor is dropped from pyproject (a bare `torch`)."""
    major, minor = torch_compat.FLOOR
    python, wheels = site_venv(tmp_path, launcher_wheel, f"{major}.{minor - 1}.0", offered=())
    proc = pip(python, "install", "--dry-run", "--find-links", str(wheels), str(launcher_wheel))
    assert proc.returncode != 0
    assert f"torch>={major}.{minor}" in proc.stderr, proc.stderr


# --- the rules, per release ----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "parsed"),
    [("2.9.1+cu128", (2, 9, 1)), ("2.13.0+cpu", (2, 13, 0)), ("2.14.0a0+git1234abc", (2, 14, 0)), ("2.10", (2, 10, 0))],
)
def test_parse_version_reads_release_local_and_dev_versions(text, parsed):
    assert torch_compat.parse_version(text) == parsed


def test_parse_version_refuses_what_is_not_a_version():
    with pytest.raises(ValueError, match="'nightly' is not of the form major.minor"):
        torch_compat.parse_version("nightly")


# Each rule, the release whose torch source changed it, and its answer on the release before that one.
FLIPS = [
    ("pipeline_init_sends_int64", (2, 10), True),  # torch/distributed/pipelining/stage.py
    ("mesh_unflattens", (2, 10), False),  # torch/distributed/device_mesh.py
    ("fsdp_takes_module_dict", (2, 11), False),  # torch/distributed/fsdp/_fully_shard/_fully_shard.py
    ("pipeline_checks_input_strides", (2, 12), True),  # torch/distributed/pipelining/stage.py
]


@pytest.mark.parametrize(("rule", "release", "before"), FLIPS, ids=[f[0] for f in FLIPS])
def test_each_rule_flips_at_the_release_whose_torch_source_changed(rule, release, before):
    answer = getattr(torch_compat, rule)
    major, minor = release
    assert answer((2, 9, 1)) is before and answer((major, minor - 1, 9)) is before
    assert answer((major, minor, 0)) is (not before) and answer((2, 14, 1)) is (not before)


def test_schedule_steps_ask_for_no_outputs_from_torch_2_10():
    assert torch_compat.schedule_step_options((2, 9, 1)) == {}
    assert torch_compat.schedule_step_options((2, 10, 0)) == {"return_outputs": False}


def test_the_ring_attention_found_is_this_torchs():
    """engines/context_parallel.py registers its CPU handlers in the table torch reads on this torch."""
    module, handlers = torch_compat.ring_attention()
    assert callable(module._templated_ring_attention) and callable(module._templated_ring_attention_backward)
    assert handlers is getattr(module, "custom_ops", None) or handlers is getattr(module, "customized_ops", None)


def test_tp_with_cp_is_refused_before_torch_2_10_with_one_line_naming_the_version(monkeypatch, tmp_path, capsys):
    """On a torch before 2.10 (here: its version read as 2.9.1) `launcher sweep` of a layout with tp and cp
    under FSDP exits 2 at config validation with one line: what, the version needed and this one, the way out."""
    monkeypatch.setattr(torch_compat, "torch_version", lambda: (2, 9, 1))
    over = ["parallel=fsdp_tp_cp", "parallel.tp=2", "parallel.cp=2", f"sweep.results_dir={tmp_path / 'r'}"]
    assert main(["sweep", *over]) == 2
    assert capsys.readouterr().err == (
        "launcher: error: parallel.layout=fsdp_tp_cp needs torch >= 2.10 (FSDP over dp × cp of tensor-parallel "
        "weights), this torch is 2.9.1: upgrade torch, or split one of them (parallel=fsdp_cp or parallel=fsdp_tp)\n"
    )
    assert not (tmp_path / "r").exists()
    monkeypatch.setattr(torch_compat, "torch_version", lambda: (2, 10, 0))
    assert torch_compat.tp_cp_refusal("fsdp_tp_cp") is None
