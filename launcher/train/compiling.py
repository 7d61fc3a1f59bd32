"""`train.compile=true`: torch.compile of the model, and the clock of the compilation.

What is compiled: each repeated unit, in place (`nn.Module.compile`), before the layout wraps the
model, as torchtitan does for FSDP: a built-in model's blocks, a `_target_` model's FSDP units
(parallel.fsdp_units or the size policy; under ddp the same modules), or the whole model where
it has none. In place keeps every parameter's name (a wrapping `torch.compile(module)` would
prefix them with `_orig_mod.`, and checkpoints and the parity state dicts would no longer match),
and per unit keeps the layout's own machinery outside the compiled code: FSDP's all-gathers run
in hooks around each unit and DDP's bucketed all-reduce in autograd hooks, neither traced.

When: compilation is lazy, in the first steps (the forward at the first call, the backward at
the first backward). Warm-up steps absorb it (validate.py refuses train.compile with no warm-up
step); `CompileClock` times every compilation, through dynamo's start/end callbacks (lazy
backward compiles included), and notes the step it happened in, so the record says how long
compiling took (`compile_s`) and whether any of it fell inside the timed steps
(`compile_after_warmup_s`, a recompile: the step times then include it).
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager

import torch
import torch.distributed as dist
from torch import nn

from launcher.config.schema import LauncherConfig
from launcher.train.models.byo import is_byo, unit_modules

BACKEND = "inductor"
"""torch.compile's backend: inductor, torch's default and what a real run compiles with
(tests/unit/test_compile.py swaps in aot_eager to leave out its C++ build time)."""


class CompileFailed(RuntimeError):
    """torch.compile raised: the trial's reason says so, in one line, with what to change."""

    def __init__(self, exc: BaseException) -> None:
        cause = getattr(exc, "inner_exception", None) or exc  # a backend's failure wraps the compiler's own error
        first = (str(cause).splitlines() or [""])[0][:160]
        super().__init__(
            f"train.compile=true: torch.compile failed ({type(cause).__name__}: {first}); "
            "set train.compile=false, or give the nodes a C++ compiler (inductor's CPU code needs one)"
        )


def is_compile_error(exc: BaseException) -> bool:
    """Whether `exc` came from dynamo or inductor (not from the model's own code)."""
    return type(exc).__module__.startswith(("torch._dynamo", "torch._inductor"))


@contextmanager
def compile_failures(*, enabled: bool) -> Iterator[None]:
    """A compile error inside becomes CompileFailed (the trial's one-line reason)."""
    try:
        yield
    except Exception as exc:
        if enabled and is_compile_error(exc):
            raise CompileFailed(exc) from exc
        raise


def compile_units(model: nn.Module, cfg: LauncherConfig) -> list[nn.Module]:
    """The modules `compile_model` compiles (module docstring)."""
    if not is_byo(cfg.model):
        return list(model.blocks)  # type: ignore[arg-type]
    return unit_modules(model, cfg.parallel) or [model]


def compile_model(model: nn.Module, cfg: LauncherConfig) -> int:
    """Compile `model`'s units in place (lazily: nothing compiles until they run); returns how many."""
    units = compile_units(model, cfg)
    for unit in units:
        unit.compile(backend=BACKEND)
    return len(units)


class CompileClock:
    """Seconds torch spends compiling, per step. Dynamo calls the start callbacks when a
    compilation begins and the end callbacks when it ends (nested ones counted once)."""

    def __init__(self) -> None:
        self.step = 0
        """The step now running (the loop sets it); compilations are booked to it."""
        self.seconds: dict[int, float] = {}
        """step → seconds spent compiling during it."""
        self._started: float | None = None
        # Lazy: importing torch._dynamo costs every rank ~1 s, paid only where train.compile is on.
        from torch._dynamo.callback import callback_handler

        self._handler = callback_handler
        callback_handler.register_start_callback(self._start)
        callback_handler.register_end_callback(self._end)

    def _start(self, _: object) -> None:
        self._started = time.perf_counter()

    def _end(self, _: object) -> None:
        if self._started is not None:
            self.seconds[self.step] = self.seconds.get(self.step, 0.0) + time.perf_counter() - self._started
            self._started = None

    def close(self) -> None:
        self._handler.remove_start_callback(self._start)
        self._handler.remove_end_callback(self._end)


def compile_metrics(clock: CompileClock | None, *, units: int, first_timed_step: int, device: torch.device) -> dict:
    """The record's compile figures, the slowest rank's (collective: every rank calls it).
    `first_timed_step`: this attempt's first step after warm-up. Without train.compile: nulls."""
    if clock is None:
        return {"compile_s": None, "compile_after_warmup_s": None, "compiled_units": 0}
    clock.close()
    after = sum(s for step, s in clock.seconds.items() if step >= first_timed_step)
    both = torch.tensor([sum(clock.seconds.values()), after], dtype=torch.float64, device=device)
    dist.all_reduce(both, op=dist.ReduceOp.MAX)
    total, late = both.tolist()
    return {"compile_s": total, "compile_after_warmup_s": late, "compiled_units": units}
