"""What a composed document goes through before the schema checks it, on either road (Hydra's,
hydra_compose.py; the recipes read plainly, plain_compose.py): a `_target_` model's or dataset's
keyword arguments folded into `kwargs`, a model or job named after its recipe file, job.argv and
job.env kept as written."""

from __future__ import annotations

from typing import Any

from launcher.config.errors import ConfigError
from launcher.config.load import escaped, fold_model_kwargs


def finished(plain: dict[str, Any], model_option: str, job_option: str) -> dict[str, Any]:
    """`plain` (composed, unresolved) ready for the closed schema; the options are the recipe files composed."""
    return _job_as_text(_named_model(_named_job(fold_model_kwargs(plain), job_option), model_option))


def _job_as_text(data: Any) -> Any:
    """`data` with job.argv and job.env kept as written: their `${…}` name values of each trial
    (launcher/config/job.py), resolved per trial at plan time, never by OmegaConf here."""
    job = data.get("job")
    if not isinstance(job, dict):
        return data
    kept = {k: escaped(v) if k in ("argv", "env") else v for k, v in job.items()}
    return {**data, "job": kept}


def _named_model(data: Any, option: str) -> Any:
    """A `_target_` model whose recipe sets no `name` is named after its recipe file."""
    model = data.get("model") or {}
    if model.get("_target_") == "???":  # merged onto the schema, a missing value would leave None: no model at all
        raise ConfigError(
            "model._target_ is not set; give the callable that builds your model, e.g. "
            "model._target_=mypkg.models.build"
        )
    if model.get("_target_") is None or model.get("name") is not None:
        return data
    return {**data, "model": {**model, "name": option.rsplit("/", 1)[-1]}}


def _named_job(data: Any, option: str) -> Any:
    """A job whose recipe sets no `name` is named after its recipe file (`job=ddp_meter` → ddp_meter)."""
    job = data.get("job")
    if not isinstance(job, dict) or job.get("name") is not None:
        return data
    return {**data, "job": {**job, "name": option.rsplit("/", 1)[-1]}}
