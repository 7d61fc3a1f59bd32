"""The built-in trainer with precision=fp8 on CPU ranks (tests/multiprocess/test_fp8_fsdp.py): torchao's
float8 layers run there on torch's CPU float8 matmuls, which the launcher refuses for speed (no fp8
tensor cores) but which compute the same float8 training. `python -m tests.support.fp8_on_cpu` takes
launcher.train's arguments; LAUNCHER_TEST_FP8_PRECOMPUTE=off trains without the scale precompute."""

from __future__ import annotations

import os

from launcher.config import validate_precision
from launcher.train import __main__ as payload
from launcher.train import dist as tdist
from launcher.train import float8

validate_precision.check_fp8_device = lambda precision, device_type: None  # CPU ranks may train fp8 here
if os.environ.get("LAUNCHER_TEST_FP8_PRECOMPUTE") == "off":
    float8.precompute_after_steps = lambda model, optimizer, cfg: None

if __name__ == "__main__":
    tdist.leave(payload.main())
