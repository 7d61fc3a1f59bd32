"""train.compile=true (launcher/train/compiling.py): the compiled model trains as the eager one
does, compilation falls within warm-up and is recorded apart from the step times, and the
config refuses compiling where warm-up could not absorb it.

The training runs in this process on a 1-rank gloo group; real runs compile with inductor (it
needs a C++ compiler on CPU), the parity test with aot_eager (the same capture, no C++ build)."""

from __future__ import annotations

import pytest
import torch
import torch.distributed as dist

from benchmarks import compile_inductor as bench  # inductor itself: the benchmark, tens of seconds cold
from launcher.config.compose import compose_config
from launcher.config.errors import ConfigError
from launcher.train import compiling
from launcher.train.models import build_model

STEPS, WARMUP = 4, 2


@pytest.fixture(scope="module")
def group():
    dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
    yield
    dist.destroy_process_group()


def test_compiled_tiny_gpt_trains_as_eager_and_compiles_within_warm_up(group, monkeypatch):
    """Dynamo's capture, AOTAutograd's forward/backward split (the backward compiled lazily, in
    the first backward) and the in-place units as a real run has them, with the aot_eager
    backend: inductor's C++ build of the same graphs takes tens of seconds cold on a 2-core machine
    (24 s in benchmarks/results/compile_inductor.md, 45-55 s when the machine is busy), past this
    suite's budget."""
    monkeypatch.setattr(compiling, "BACKEND", "aot_eager")
    # Losses to 1e-5 relative: inductor fuses the norms', softmax's and loss's reductions, so fp32
    # sums may run in another order (a few ulps per op); a real difference in what is computed (a
    # block left out, stale weights) moves the loss by > 1e-3 from step 2 on. (aot_eager: equal.)
    eager, eager_losses, _ = bench.trained(False, STEPS, WARMUP)
    figures, losses, times = bench.trained(True, STEPS, WARMUP)
    assert eager == {"compile_s": None, "compile_after_warmup_s": None, "compiled_units": 0}
    assert losses == pytest.approx(eager_losses, rel=1e-5)
    assert figures["compiled_units"] == 2  # tiny_gpt's two blocks, each in place
    assert figures["compile_s"] > 0 and figures["compile_after_warmup_s"] == 0  # all of it in warm-up
    assert figures["compile_s"] <= sum(times[:WARMUP])  # booked to the warm-up steps whose time it was part of


def test_compiling_in_place_keeps_the_parameter_names():
    cfg = compose_config(["model=tiny_gpt", "train.compile=true"])
    with torch.device("meta"):
        model = build_model(cfg.model)
    names = [n for n, _ in model.named_parameters()]
    assert compiling.compile_model(model, cfg) == cfg.model.n_layers
    assert [n for n, _ in model.named_parameters()] == names and "_orig_mod" not in "".join(names)


def test_a_compile_error_becomes_the_trials_one_line_reason():
    from torch._dynamo.exc import BackendCompilerFailed  # lazy: only this test builds one

    exc = BackendCompilerFailed(
        lambda gm, ex: gm, RuntimeError("InvalidCxxCompiler: No working C++ compiler found"), None
    )
    with pytest.raises(compiling.CompileFailed) as raised:
        with compiling.compile_failures(enabled=True):
            raise exc
    assert str(raised.value) == (
        "train.compile=true: torch.compile failed (RuntimeError: InvalidCxxCompiler: No working "
        "C++ compiler found); set train.compile=false, or give the nodes a C++ compiler "
        "(inductor's CPU code needs one)"
    )
    with pytest.raises(ValueError):  # the model's own errors pass unchanged
        with compiling.compile_failures(enabled=True):
            raise ValueError("shape mismatch")


@pytest.mark.parametrize(
    "overrides, message",
    [
        (
            ["sweep.warmup_steps=0"],
            "train.compile=true compiles during the first steps, but sweep.warmup_steps=0 would "
            "time them; set sweep.warmup_steps=2 or more",
        ),
        (
            ["run.warmup_steps=0"],
            "train.compile=true compiles during the first steps, but run.warmup_steps=0 would "
            "time them; set run.warmup_steps=2 or more",
        ),
        (
            ["parallel=pipeline"],
            "train.compile=true is supported with parallel.layout=ddp or fsdp, not pipeline; use one "
            "of those, or set train.compile=false",
        ),
    ],
)
def test_compile_without_warm_up_or_with_an_untested_layout_is_refused_in_one_line(overrides, message):
    with pytest.raises(ConfigError) as raised:
        compose_config(["train.compile=true", *overrides])
    assert str(raised.value) == message
    assert compose_config(overrides).train.compile is False  # the same values without compile are fine
