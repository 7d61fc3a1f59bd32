"""The search finds what the experts chose or better, by the model's own measure, on published
runs: two rows of benchmarks/search_corpus.py's acceptance (the whole corpus takes about a minute
and a half there: benchmarks/results/search_corpus.md)."""

from __future__ import annotations

import csv

import pytest

from benchmarks.search_corpus import CORPUS, judge


def _first(source: str, layout: str) -> dict:
    with open(CORPUS, newline="") as f:
        return next(r for r in csv.DictReader(f) if r["source"] == source and r["layout"] == layout)


@pytest.mark.parametrize(
    "source, layout", [("megatron_narayanan_2021", "ddp_tp_pp"), ("megatron_core_2024", "ddp_tp_pp")]
)
def test_the_searched_best_predicts_at_least_the_published_layout_and_fits(source, layout):
    r = judge(_first(source, layout))
    assert r["published_memory_gib"] <= r["limit_gib"]  # the published configuration is a candidate
    assert r["verdict"] == "met" and r["best_tokens_per_s"] >= r["published_tokens_per_s"]
    assert r["best_memory_gib"] <= r["limit_gib"]
