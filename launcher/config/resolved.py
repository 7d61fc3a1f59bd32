"""`${…}` in a composed document resolved as OmegaConf resolves it, for compose.py's cache road.

The one interpolation the bundled recipes hold, `${oc.env:NAME,default}` (devcluster's slurm_conf),
is read here from the environment, as OmegaConf's `oc.env` reads it: the variable's text, else the
default's. Anything else (another resolver, a reference to a key, an escape, a default that OmegaConf's
grammar would read as other than its text) goes to OmegaConf, whose import and resolution a cached
command otherwise skips (issue 30 item 11).
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterator
from typing import Any

from launcher.config.simple_override import NOT_WORDS
from launcher.config.typed_document import Unfit

_ENV = re.compile(r"\$\{oc\.env:([A-Za-z_]\w*)(?:,([A-Za-z_/][\w\-./]*))?\}")


def resolved(doc: dict[str, Any]) -> dict[str, Any]:
    """`doc` with every `${…}` resolved (`${oc.env:…}` read now: a document is kept unresolved); a value
    still missing (`???`) or an interpolation that does not resolve is Unfit: Hydra's road names it."""
    texts = list(_strings(doc))
    if "???" in texts:
        raise Unfit("a value is missing")
    if not any("${" in t for t in texts):
        return doc
    try:
        return _read_env(doc)
    except LookupError:  # not only oc.env of a set variable or a plain default: OmegaConf's own resolution
        return _by_omegaconf(doc)


def _read_env(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _read_env(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_read_env(v) for v in value]
    if not isinstance(value, str) or "${" not in value:
        return value
    if "\\" in value:
        raise LookupError("an escape")
    text = _ENV.sub(_env_value, value)
    if "${" in text:
        raise LookupError("another interpolation")
    return text


def _env_value(match: re.Match[str]) -> str:
    name, default = match.groups()
    if name in os.environ:
        return os.environ[name]
    if default is None or default.lower() in NOT_WORDS:  # OmegaConf reads these as bool, null or float
        raise LookupError(f"{name} unset")
    return default


def _by_omegaconf(doc: dict[str, Any]) -> dict[str, Any]:
    from omegaconf import OmegaConf  # lazy: most documents resolve without it
    from omegaconf.errors import OmegaConfBaseException

    try:
        return OmegaConf.to_container(OmegaConf.create(doc), resolve=True)  # type: ignore[return-value]
    except OmegaConfBaseException as exc:
        raise Unfit(str(exc)) from None


def _strings(value: Any) -> Iterator[str]:
    if isinstance(value, str):
        yield value
    elif isinstance(value, dict):
        for v in value.values():
            yield from _strings(v)
    elif isinstance(value, list):
        for v in value:
            yield from _strings(v)
