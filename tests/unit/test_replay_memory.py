"""The replay's memory verdict (issue 32 item 3, benchmarks/replay_memory.py): every corpus run really
ran, so none reads `oom (predicted)` unless its source used something the config cannot express, and
then the verdict says which."""

from __future__ import annotations

import dataclasses

import pytest

from benchmarks import published_replay as pr
from benchmarks.replay_mapping import map_row
from benchmarks.replay_memory import fitted_checkpointing, memory_verdict
from launcher.config.compose import compose_config


def _corpus_row(source: str, gpus: str, seq_len: str = "") -> dict:
    (row,) = [
        r
        for r in pr.read_corpus(pr.CORPUS)
        if r["source"] == source and r["gpus"] == gpus and r["seq_len"] == (seq_len or r["seq_len"])
    ]
    return row


def _verdict(row: dict) -> tuple[str, list[str]]:
    mapped, cfg = fitted_checkpointing(map_row(row), compose_config(map_row(row).overrides, None))
    return memory_verdict(mapped, cfg), mapped.assumed


@pytest.mark.parametrize(
    "source, gpus, seq_len, fits",
    [
        # Read `oom (predicted)` before (260.1 → 207.6 GiB > 171.0 usable): planned without the recompute the
        # fork's DeepEP configs set (mode 'full'); measured 167.93 → 114.78 GiB.
        ("nous_deepep_2511", "8", "", "fits: estimate 133.3 GiB, 171.0 GiB usable"),
        ("nous_deepep_2511", "16", "", "fits: estimate 104.9 GiB, 171.0 GiB usable"),
        ("nous_deepep_2511", "32", "", "fits: estimate 90.7 GiB, 171.0 GiB usable"),
        ("nous_deepep_2511", "64", "", "fits: estimate 83.6 GiB, 171.0 GiB usable"),
        ("nous_deepep_2511", "128", "", "fits: estimate 80.0 GiB, 171.0 GiB usable"),
        # Read `oom (predicted)` before (146.5 GiB > 76.0): checkpointing unpublished, assumed selective. The 8K
        # stage's rows say `none` since issue 32 (the paper's §3.3.2): test_replay_sources.py holds their verdict.
        ("llama3_meta_2024", "16384", "131072", "fits: estimate 42.4 GiB, 76.0 GiB usable"),
    ],
)
def test_the_runs_that_read_oom_fit_with_the_recompute_their_source_used(source, gpus, seq_len, fits):
    verdict, assumed = _verdict(_corpus_row(source, gpus, seq_len))
    assert verdict == fits
    if source == "nous_deepep_2511":
        assert any(a.startswith("activation checkpointing full: NousResearch/torchtitan's DeepEP") for a in assumed)
    else:
        said = next(a for a in assumed if a.startswith("activation checkpointing not published"))
        assert said.startswith("activation checkpointing not published: full, the least recompute that fits")
        assert "selective's estimate 14" in said and "GiB > 76.0 GiB usable" in said and "the run ran" in said


def test_a_run_that_offloaded_to_cpu_reads_oom_with_what_the_config_cannot_express():
    row = _corpus_row("nous_deepep_2511", "128") | {"micro_batch": "20", "global_batch": "2560"}
    mapped = map_row(row | {"offload": "optimizer state"})
    assert mapped.offload == "optimizer state"
    verdict = memory_verdict(mapped, compose_config(mapped.overrides, None))
    assert verdict == (
        "oom (predicted): the source offloads optimizer state to CPU, which the config cannot express "
        "(estimate 186.4 GiB, 171.0 GiB usable without offload)"
    )
    plain = dataclasses.replace(mapped, offload="")
    assert memory_verdict(plain, compose_config(plain.overrides, None)) == (
        "oom (predicted): estimate 186.4 GiB, 171.0 GiB usable"
    )
