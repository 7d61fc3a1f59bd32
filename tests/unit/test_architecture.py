"""The folder tree reads as the architecture: packages in a declared order with no import running
up it, no import cycles (function-level and type-only imports included), every CLI verb lives in
a module named after it, and the package imports only what pyproject.toml declares."""

from __future__ import annotations

import argparse
import ast
import importlib
import re
import sys
from pathlib import Path

import pytest
import tomllib

from launcher import cli

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "launcher"


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


MODULES = {_module_name(p): p for p in PACKAGE.rglob("*.py")}


def _imports(name: str, path: Path) -> list[ast.stmt]:
    return [n for n in ast.walk(ast.parse(path.read_text())) if isinstance(n, (ast.Import, ast.ImportFrom))]


def _launcher_targets(name: str, path: Path) -> set[str]:
    """Modules of this package that `name` imports anywhere in its body."""
    out: set[str] = set()
    for node in _imports(name, path):
        if isinstance(node, ast.Import):
            out |= {a.name for a in node.names if a.name.split(".")[0] == "launcher"}
            continue
        assert node.level == 0, f"{path}: relative import; the package uses absolute imports"
        mod = node.module or ""
        if mod.split(".")[0] != "launcher":
            continue
        subs = {f"{mod}.{a.name}" for a in node.names} & MODULES.keys()
        out |= subs or {mod}
    return {t for t in out if t in MODULES and t != name}


# The packages, bottom to top: an import may go to its own level or below, never up. Leaves first;
# the layout table below the config that validates against it; device peaks and FLOP formulas
# below both the payload (train) and the planner (perf); the verbs' drivers (run) and the CLI last.
ORDER: tuple[tuple[str, ...], ...] = (
    ("launcher", "io", "cgroup", "signals", "meter", "integrations", "torch_compat"),
    ("layouts",),
    ("config",),
    ("compute",),
    ("trials",),
    ("harvest",),
    ("train",),
    ("slurm",),
    ("results",),
    ("report",),
    ("perf",),
    ("run",),
    ("cli", "__main__"),
)
LEVEL = {pkg: level for level, pkgs in enumerate(ORDER) for pkg in pkgs}


def _package(module: str) -> str:
    """`launcher.perf.step` → `perf`; `launcher.io` → `io`; `launcher` → `launcher`."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else parts[0]


def upward_imports(modules: dict[str, Path]) -> list[str]:
    """Every import (module top, function body or TYPE_CHECKING block alike) from a package to one
    above it in ORDER, and every package ORDER does not place, as `file:line: a -> b` lines."""
    out = []
    for name, path in sorted(modules.items()):
        src = _package(name)
        if src not in LEVEL:
            out.append(f"{path}: package {src!r} is not in ORDER; place it there")
            continue
        for node in _imports(name, path):
            for target in _named_modules(node):
                dst = _package(target)
                if dst != src and LEVEL.get(dst, -1) > LEVEL[src]:
                    out.append(f"{path}:{node.lineno}: {src} -> {dst} ({target}) runs up the declared order")
    return out


def _named_modules(node: ast.stmt) -> list[str]:
    if isinstance(node, ast.Import):
        return [a.name for a in node.names if a.name.split(".")[0] == "launcher"]
    mod = node.module or ""
    return [mod] if mod.split(".")[0] == "launcher" else []


def test_no_import_runs_up_the_declared_package_order():
    assert upward_imports(MODULES) == []


def test_the_order_check_sees_an_upward_import_even_a_lazy_or_type_only_one(tmp_path):
    probe = tmp_path / "probe.py"
    probe.write_text(
        "from typing import TYPE_CHECKING\n"
        "from launcher.io import atomic_write_text\n"
        "if TYPE_CHECKING:\n    from launcher.perf.step import PerfModel\n"
        "def f():\n    import launcher.run.sweep  # lazy: a probe\n"
    )
    assert upward_imports({"launcher.config.probe": probe}) == [
        f"{probe}:4: config -> perf (launcher.perf.step) runs up the declared order",
        f"{probe}:6: config -> run (launcher.run.sweep) runs up the declared order",
    ]
    assert upward_imports({"launcher.run.probe": probe}) == []
    assert upward_imports({"launcher.newpkg.probe": probe}) == [
        f"{probe}: package 'newpkg' is not in ORDER; place it there"
    ]


def _cycle() -> list[str] | None:
    graph = {n: _launcher_targets(n, p) for n, p in MODULES.items()}
    state: dict[str, int] = {}

    def visit(n: str, stack: list[str]) -> list[str] | None:
        state[n] = 1
        for t in sorted(graph[n]):
            if state.get(t) == 1:
                return [*stack[stack.index(t) :], t] if t in stack else [n, t]
            if t not in state and (found := visit(t, [*stack, t])):
                return found
        state[n] = 2
        return None

    for n in sorted(graph):
        if n not in state and (found := visit(n, [n])):
            return found
    return None


def test_no_import_cycle_even_through_function_level_imports():
    assert _cycle() is None, "import cycle: " + " -> ".join(_cycle() or [])


def test_function_level_imports_say_why_they_are_lazy():
    """Imports sit at module top; the exceptions keep a heavy import (torch's pipelining,
    matplotlib) off paths that do not need it, and a comment just above says so."""
    offenders = []
    for name, path in MODULES.items():
        lines = path.read_text().splitlines()
        for node in _imports(name, path):
            if node.col_offset == 0:
                continue
            above = " ".join(lines[max(0, node.lineno - 4) : node.lineno]).lower()
            if "lazy" not in above and "type_checking" not in above:
                offenders.append(
                    f"{path.relative_to(ROOT)}:{node.lineno}: import inside a block with no comment saying why"
                )
    assert not offenders, "\n".join(offenders)


def _verbs() -> list[str]:
    sub = next(a for a in cli.parser()._actions if isinstance(a, argparse._SubParsersAction))
    return sorted(sub.choices)


@pytest.mark.parametrize("verb", _verbs())
def test_each_verb_lives_in_a_module_named_after_it(verb):
    module = cli.VERBS[verb]
    assert module.rsplit(".", 1)[1] == verb
    found = [p for p in PACKAGE.rglob(f"{verb}.py")]
    assert [MODULES[module]] == found, f"launcher/**/{verb}.py should be exactly {module}"
    assert callable(importlib.import_module(module).main)


def test_every_verb_is_dispatched():
    assert sorted(cli.VERBS) == _verbs()


def _declared() -> set[str]:
    meta = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    # An extra other than the test tools' and the integrations' (EXTRA_OF, checked on their own) declares what a
    # feature imports lazily (fp8: torchao).
    skip = {"test", *EXTRA_OF.values()}
    extras = [d for name, deps in meta.get("optional-dependencies", {}).items() if name not in skip for d in deps]
    names = [re.split(r"[<>=!~ \[;]", d)[0].lower().replace("_", "-") for d in meta["dependencies"] + extras]
    return set(names)


# distribution name → import name, where they differ
IMPORT_NAME = {"hydra-core": "hydra", "pyyaml": "yaml", "nvidia-ml-py": "pynvml"}
# declared for what they do behind another package's call, never imported by name
USED_THROUGH = {"pyarrow": "pandas.DataFrame.to_parquet / read_parquet"}


# launcher.integrations.<module> → the pyproject extra that declares the framework it imports: nothing else
# imports these modules, so the framework is the user's choice, not a dependency.
EXTRA_OF = {"launcher.integrations.hf": "hf", "launcher.integrations.lightning": "lightning"}


def _extra(name: str) -> set[str]:
    meta = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    return {re.split(r"[<>=!~ \[;]", d)[0].lower().replace("_", "-") for d in meta[name]}


def _third_party(name: str, path: Path) -> set[str]:
    stdlib = set(sys.stdlib_module_names)
    out = set()
    for node in _imports(name, path):
        mods = [a.name for a in node.names] if isinstance(node, ast.Import) else [node.module or ""]
        out |= {m.split(".")[0] for m in mods if m and node.__dict__.get("level", 0) == 0}
    return {m for m in out if m not in stdlib and m != "launcher"}


@pytest.mark.parametrize("module", sorted(EXTRA_OF))
def test_an_integration_imports_only_its_extra_and_nothing_imports_it(module):
    imported = _third_party(module, MODULES[module])
    assert imported and imported <= {IMPORT_NAME.get(d, d) for d in _extra(EXTRA_OF[module])}
    importers = [n for n, p in MODULES.items() if n != module and module in _launcher_targets(n, p)]
    assert importers == []


def test_third_party_imports_are_declared_and_declared_ones_used():
    stdlib = set(sys.stdlib_module_names)
    imported = set()
    for name, path in MODULES.items():
        if name in EXTRA_OF:
            continue
        for node in _imports(name, path):
            mods = [a.name for a in node.names] if isinstance(node, ast.Import) else [node.module or ""]
            imported |= {m.split(".")[0] for m in mods if m and node.__dict__.get("level", 0) == 0}
    third_party = {m for m in imported if m not in stdlib and m != "launcher"}
    declared = {IMPORT_NAME.get(d, d) for d in _declared()}
    assert third_party - declared == set(), "imported but not declared in pyproject.toml"
    assert declared - third_party - set(USED_THROUGH) == set(), "declared in pyproject.toml but never imported"


def test_modules_fit_a_reviewer():
    """≤ ~400 lines a module (the issue's bound), so each reads in one sitting."""
    long = {str(p.relative_to(ROOT)): n for p in MODULES.values() if (n := len(p.read_text().splitlines())) > 400}
    assert not long
