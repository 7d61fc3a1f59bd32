"""The three examples that report through launcher.meter (examples/ddp_meter, hf_trainer, lightning), each
started directly by torchrun at 1 and 2 ranks as a user would run it outside launcher, with only
LAUNCHER_METER_FILE set: what read_reported reads from the meter file it wrote is the program's own printed
whole-job tokens/s within 2%, and the file holds one line per optimizer step with the whole job's tokens."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from launcher.harvest import PRINTED, read_reported

pytestmark = pytest.mark.torch_dist

REPO = Path(__file__).resolve().parents[2]
TORCHRUN = Path(sys.executable).parent / "torchrun"
STEPS, WARMUP, SEQ, MICRO = 12, 4, 64, 2
METRICS = {"ddp_meter": "meter", "hf_trainer": "hf", "lightning": "lightning"}


def _run(example: str, ranks: int, accum: int, tmp: Path) -> str:
    """torchrun the example; its rank 0 output (torchrun does not prefix it)."""
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")]),
        "LAUNCHER_METER_FILE": str(tmp / "meter.jsonl"),
    }
    cmd = [
        str(TORCHRUN),
        "--standalone",
        f"--nproc-per-node={ranks}",
        str(REPO / "examples" / example / "train.py"),
        f"--micro={MICRO}",
        f"--accum={accum}",
        f"--steps={STEPS}",
        f"--warmup-steps={WARMUP}",
        f"--seq-len={SEQ}",
    ]
    done = subprocess.run(cmd, env=env, cwd=tmp, capture_output=True, text=True, timeout=240)
    assert done.returncode == 0, f"{' '.join(cmd)} exited {done.returncode}:\n{done.stdout}\n{done.stderr[-4000:]}"
    return done.stdout


@pytest.mark.parametrize("example", sorted(METRICS))
@pytest.mark.parametrize(("ranks", "accum"), [(1, 1), (2, 2)])
def test_the_meter_reads_what_the_program_printed(example, ranks, accum, tmp_path):
    out = _run(example, ranks, accum, tmp_path)
    printed = [float(m["tokens_per_s"]) for m in PRINTED.finditer(out)]
    assert len(printed) == 1, out
    assert re.search(rf"whole-job tokens/s over steps {WARMUP + 1}-{STEPS}: ", out)
    lines = [json.loads(x) for x in (tmp_path / "meter.jsonl").read_text().splitlines()]
    tokens = MICRO * accum * ranks * SEQ
    assert [(x["step"], x["tokens"], x["samples"]) for x in lines] == [(i, tokens, None) for i in range(1, STEPS + 1)]
    got = read_reported(
        metrics=METRICS[example],
        trial_dir=tmp_path,
        rank0_text=out,
        warmup_steps=WARMUP,
        world_size=ranks,
        tokens_per_sample=SEQ,
        pattern=None,
    )
    assert got.source == METRICS[example] and len(got.step_s) == STEPS - WARMUP
    assert got.printed_tokens_per_s == printed[0]
    assert got.tokens_per_s == pytest.approx(printed[0], rel=0.02)
