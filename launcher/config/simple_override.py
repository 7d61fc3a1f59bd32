"""The overrides a command line mostly holds (`sweep.repeats=64`, `cluster=devcluster`,
`sweep.results_dir=/scratch/x`, `sweep.nodes=[1,2,4]`), read without Hydra's grammar.

Hydra's ANTLR parser and its composition cost a `launcher sweep` more than the rest of a 256-trial
submission (issue 30 item 11). A strict subset of the grammar is read here, to the value Hydra's
parser gives (tests/unit/test_compose_cache.py holds them equal on every form below): anything
outside it (`+`/`~` prefixes, sweeps `a,b`, `${…}`, escapes, exponents, `True`) returns None, and
the caller hands the whole command to Hydra.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

_KEY = re.compile(r"[A-Za-z_]\w*(?:\.[A-Za-z_]\w*)*")
_INT = re.compile(r"[+-]?(?:0|[1-9][0-9]*)")
_FLOAT = re.compile(r"[+-]?(?:0|[1-9][0-9]*)\.[0-9]+")
# Starts with a letter, `_` or `/`, never a digit, sign or dot: Hydra reads `1e5`, `-3` and `.5` as numbers.
_WORD = re.compile(r"[A-Za-z_/][\w\-./+@%]*")
_QUOTED = re.compile(r"'[^'\\$]*'|\"[^\"\\$]*\"")
_ITEM = re.compile(rf"{_QUOTED.pattern}|[^,\[\]'\"]+")
_KEYWORDS = {"true": True, "false": False, "null": None}
NOT_WORDS = {"true", "false", "null", "inf", "nan"}  # in any case, the grammar reads them as bool, null or float


def simple_scalar(text: str) -> tuple[bool, Any]:
    """(True, value) where `text` is a scalar of the subset, else (False, None)."""
    if text in _KEYWORDS:
        return True, _KEYWORDS[text]
    if _INT.fullmatch(text):
        return True, int(text)
    if _FLOAT.fullmatch(text):
        return True, float(text)
    if _QUOTED.fullmatch(text):
        return True, text[1:-1]
    if _WORD.fullmatch(text) and text.lower() not in NOT_WORDS:
        return True, text
    return False, None


def simple_value(text: str) -> tuple[bool, Any]:
    """A scalar, or a flat list of scalars `[a,b]` with no spaces outside quotes."""
    if not (text.startswith("[") and text.endswith("]")):
        return simple_scalar(text)
    inner = text[1:-1]
    if not inner:
        return True, []
    items = [m.group(0) for m in _ITEM.finditer(inner)]
    if ",".join(items) != inner:  # a nested bracket, a stray quote, an empty item
        return False, None
    parsed = [simple_scalar(item) for item in items]
    return (True, [v for _, v in parsed]) if all(ok for ok, _ in parsed) else (False, None)


def simple_override(override: str) -> tuple[str, Any] | None:
    """`key=value` of the subset → (key, value); None for anything Hydra's grammar must read."""
    key, sep, text = override.partition("=")
    if not sep or not _KEY.fullmatch(key):
        return None
    ok, value = simple_value(text)
    return (key, value) if ok else None


def all_simple(overrides: Sequence[str]) -> bool:
    """Every override is of the subset (and so none sweeps: a comma sweep is outside it)."""
    return all(simple_override(ov) is not None for ov in overrides)
