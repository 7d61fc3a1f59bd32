"""The per-trial record: one JSON document, its schema, and values that agree with each other."""

from __future__ import annotations

import json

import pytest

pytestmark = pytest.mark.torch_dist

TOP = {
    "schema_version": int,
    "status": str,
    "reason": type(None),
    "trial": dict,
    "config": dict,
    "versions": dict,
    "hosts": list,
    "world_size": int,
    "nodes": int,
    "device": str,
    "device_name": str,
    "backend": str,
    "metrics": dict,
    "started_at": float,
    "finished_at": float,
    "wall_s": float,
}
METRICS = {
    "step_time_median_s": float,
    "step_time_p10_s": float,
    "step_time_p90_s": float,
    "samples_per_s": float,
    "tokens_per_s": float,
    "tokens_per_s_per_device": float,
    "steps_measured": int,
    "params": int,
    "params_non_embedding": int,
    "flops_per_token": float,
    "mfu": type(None),
    "rank_step_time_median_s": list,
    "rank_spread": float,
    "allreduce_bytes": int,
    "allreduce_time_s": float,
    "algbw_gbps": float,
    "busbw_gbps": float,
    "compute_time_s": float,
    "ccr": float,
    "peak_memory_bytes": int,
    "peak_memory_kind": str,
    "loss_first": float,
    "loss_last": float,
    "losses": list,
}


@pytest.fixture(scope="module")
def record(default_sweep):
    (path,) = default_sweep.glob("trials/*-ws2/record.json")
    return json.loads(path.read_text())


def test_record_fields_and_types(record):
    assert {k: type(record[k]) for k in TOP} == TOP
    assert {k: type(record["metrics"][k]) for k in METRICS} == METRICS
    assert record["schema_version"] == 1 and record["status"] == "completed"


def test_record_values_agree(record):
    m, t = record["metrics"], record["trial"]
    assert record["world_size"] == t["world_size"] == 2 == len(record["hosts"]) == len(m["rank_step_time_median_s"])
    assert record["backend"] == "gloo" and record["device"] == "cpu"
    assert m["steps_measured"] == t["steps"] - t["warmup_steps"] == 25
    assert len(m["losses"]) == t["steps"] and m["losses"][0] == m["loss_first"] and m["losses"][-1] == m["loss_last"]
    assert m["step_time_p10_s"] <= m["step_time_median_s"] <= m["step_time_p90_s"]
    assert m["samples_per_s"] == pytest.approx(t["global_batch"] / m["step_time_median_s"])
    assert m["allreduce_bytes"] == 4 * m["params"]
    assert m["busbw_gbps"] == pytest.approx(m["algbw_gbps"] * 2 * (2 - 1) / 2)
    assert m["ccr"] == pytest.approx(m["allreduce_time_s"] / m["compute_time_s"])
    assert record["config"]["batch"] == {"micro": 8, "accum": 1, "global_batch": None}
    assert record["versions"]["torch"].startswith("2.")
