"""Checks on a `_target_` model's recipe that need no torch and no import of the user's package
(those run at plan time: launcher/train/models/byo_check.py)."""

from __future__ import annotations

from launcher.config.checks import at_least
from launcher.config.errors import ConfigError
from launcher.config.schema import DataConfig, InputSpec, ModelConfig

LOSSES = ("cross_entropy", "mse")
TARGET_KEY = "target"  # the batch key of the loss's target (train/models/byo.py reads it)
_INPUT_EXAMPLE = "model.inputs={tokens:{shape:[1024],dtype:int64,high:32000}}"


def check_byo(m: ModelConfig, data: DataConfig) -> None:
    if m._target_ is None:
        unused = [k for k in ("kwargs", "inputs", "target", "loss") if getattr(m, k)]
        if unused:  # else ignored: the built-in model would run without a word
            raise ConfigError(
                f"model.{unused[0]} is for your own model (model._target_), but model={m.name} is built in; "
                f"remove model.{unused[0]}, or set model._target_=mypkg.models.build"
            )
        return
    if not m.inputs:
        raise ConfigError(
            f"model._target_={m._target_!r} needs model.inputs, what one sample looks like (each "
            f"reaches the model as a keyword argument); set e.g. {_INPUT_EXAMPLE}"
        )
    for name, spec in m.inputs.items():
        _check_spec(f"model.inputs.{name}", spec)
    if m.target is not None:
        _check_spec("model.target", m.target)
        if TARGET_KEY in m.inputs:
            raise ConfigError(
                f"model.inputs.{TARGET_KEY} clashes with model.target, which the batch carries under "
                f"'{TARGET_KEY}'; rename the input"
            )
    _check_loss(m)
    if m.activation_checkpointing == "selective":
        raise ConfigError(
            f"model.activation_checkpointing=selective recomputes the built-in models' attention core; "
            f"model._target_={m._target_!r} has none the launcher knows: use full (each FSDP unit "
            "recomputed) or none"
        )
    if data.kind == "file":
        raise ConfigError(
            f"data=file holds token windows for the built-in models; model._target_={m._target_!r} "
            "takes its batch from model.inputs (data=synthetic)"
        )


def _check_spec(key: str, spec: InputSpec) -> None:
    for n in spec.shape:
        at_least(f"{key}.shape entries", n, 1, 64)
    integer = str(spec.dtype) not in ("float32", "float64", "float16", "bfloat16")
    if integer and str(spec.dtype) != "bool" and spec.high is None:
        raise ConfigError(
            f"{key} is {spec.dtype}: it needs {key}.high, the exclusive upper bound of its values "
            f"(a vocabulary size, a class count); set e.g. {key}.high=1000"
        )
    if integer and spec.high is not None and spec.high <= spec.low:
        raise ConfigError(
            f"{key}.high={spec.high} must be above {key}.low={spec.low}; set e.g. {key}.high={spec.low + 2}"
        )


def _check_loss(m: ModelConfig) -> None:
    loss = m.loss
    named = isinstance(loss, str) and loss in LOSSES
    custom = isinstance(loss, dict) and isinstance(loss.get("_target_"), str)
    if loss is not None and not (named or custom):
        raise ConfigError(
            f"model.loss={loss!r} must be cross_entropy, mse, or {{_target_: mypkg.losses.my_loss}} "
            "(called as loss(output, target)); or null when the model returns its loss"
        )
    if loss is not None and m.target is None:
        raise ConfigError(
            f"model.loss={loss if named else loss['_target_']} compares the output with model.target, "
            "which is not set; set e.g. model.target={shape:[],dtype:int64,high:1000}"
        )
    if loss is None and m.target is not None:
        raise ConfigError(
            "model.target is set but model.loss is null (the model's own loss); set model.loss=cross_entropy, "
            "mse or {_target_: ...}, or remove model.target"
        )
