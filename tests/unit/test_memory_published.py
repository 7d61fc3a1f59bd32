"""The memory estimate at the edge (issue 32 item 3): the margin is what the published peaks give, the
estimate is scored on both sides of them, and its sharded state follows a source's measured peaks term
by term (benchmarks/memory_published.py)."""

from __future__ import annotations

import csv
import math

import pytest

from benchmarks import memory_published as mp
from launcher.perf.memory import MEMORY_MARGIN


@pytest.fixture(scope="module")
def scored() -> list[dict]:
    corpus = mp.read(mp.SCALING)
    return [mp.scored(r, corpus) for r in mp.read(mp.MEMORY)]


def test_the_margin_is_the_memory_the_fullest_published_run_left_free(scored):
    with open(mp.MEMORY, newline="") as f:
        rows = list(csv.DictReader(f))
    # Recomputed from the CSV: the device is the printed one (GiB ÷ share) where the source prints a share,
    # else the device the replay maps the hardware to (96 GB H100s: cluster.device_memory_gb=96).
    shares = [
        float(r["measured_gib"]) / (float(r["device_gib"]) if r["device_gib"] else 96.0)
        for r in rows
        if r["outcome"] == "ran"
    ]
    assert max(shares) == pytest.approx(167.93 / 178.36, abs=1e-4)  # Nous DeepEP, 8 B200s, 94.15%
    assert MEMORY_MARGIN == math.floor((1 - max(shares)) * 100) / 100 == mp.derived_margin(scored) == 0.05
    assert all(not r["device_gib"] for r in rows if r["source"] == "torchtitan_h100_2024")


def test_the_sharded_state_falls_as_the_measured_peak_does(scored):
    """Nous's strong-scaling rows change only the data-parallel degree (8 → 128 B200s): the measured peak
    falls 167.93 − 114.78 = 53.15 GiB, all of it sharded state; the estimate's params + grads + optimizer
    fall 53.3 GiB (52.5 before Qwen3's 128-wide heads, model.head_dim, counted its 30.5B parameters), its
    activations not at all."""
    state = mp.strong_scaling_state(scored)
    assert state["measured_fall_gib"] == pytest.approx(53.15)
    assert state["estimated_state_fall_gib"] == pytest.approx(53.3, abs=0.05)
    assert state["estimated_activation_fall_gib"] == 0
    by_gpus = {int(r["what"].split()[1]): r["terms_gib"] for r in scored if r["what"].endswith("expert parallel")}
    assert sorted(by_gpus) == [8, 16, 32, 64, 128]
    # AdamW's two float32 moments, sharded over every GPU: 16 times smaller at 16 times the GPUs.
    assert by_gpus[8]["optimizer"] == pytest.approx(16 * by_gpus[128]["optimizer"])
    # The float32 parameter shard halves with each doubling; the gathered 16-bit units beside it do not.
    falls = [by_gpus[n]["params"] - by_gpus[2 * n]["params"] for n in (8, 16, 32, 64)]
    assert falls == pytest.approx([falls[0] / 2**k for k in range(4)])


def test_the_estimate_is_scored_on_both_sides(scored, tmp_path):
    s = mp.summary(scored, MEMORY_MARGIN)
    assert (s["ran"], s["under"], s["over"]) == (24, 15, 9)
    assert s["min_ratio"] == pytest.approx(96.7 / 142.2, abs=0.01)  # Nous DeepEP at micro 10: under by a third
    assert s["max_ratio"] == pytest.approx(67.6 / 61.8, abs=0.01)  # 8B compile + Float8 at 128: over
    assert s["ran_but_oom"] == []
    # Of the two local batches that ran out, the estimate reads the larger one oom and misses the other.
    assert [w.split("batch.micro=")[1][:2] for w in s["oom_caught"]] == ["20"]
    mp.write(tmp_path, scored, margin=MEMORY_MARGIN, state=mp.strong_scaling_state(scored))
    text = (tmp_path / "memory_published.md").read_text()
    assert "under-estimated 15, at or over 9; estimate ÷ measured 0.68–1.09" in text
    assert "covers the under-estimate of 10 of 24 runs" in text
