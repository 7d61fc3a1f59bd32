"""The framework callbacks' arithmetic, with the framework's objects stood in for: the whole job's tokens (or
samples) of each optimizer step reach launcher.meter once per step, not once per micro-batch."""

from __future__ import annotations

import json
from types import SimpleNamespace

import pytest
import torch

from launcher import meter
from launcher.integrations import hf, lightning


@pytest.fixture
def lines(tmp_path, monkeypatch):
    path = tmp_path / "meter.jsonl"
    monkeypatch.setenv(meter.ENV_FILE, str(path))
    for var in meter._RANK_VARS:  # whatever launched pytest, this process is rank 0
        monkeypatch.delenv(var, raising=False)
    return lambda: [(x["tokens"], x["samples"]) for x in map(json.loads, path.read_text().splitlines())]


def test_hf_counts_per_device_batch_times_accumulation_times_world_size(lines):
    args = SimpleNamespace(per_device_train_batch_size=4, gradient_accumulation_steps=3, world_size=2)
    hf.MeterCallback(tokens_per_sample=128).on_step_end(args, None, None)
    hf.MeterCallback().on_step_end(args, None, None)
    assert lines() == [(4 * 3 * 2 * 128, None), (None, 24)]


def test_lightning_reports_once_per_optimizer_step_with_the_micro_batches_it_took(lines):
    cb, trainer = lightning.MeterCallback(tokens_per_sample=10), SimpleNamespace(global_step=0, world_size=4)
    batch = (torch.zeros(3, 11, dtype=torch.long),)
    for global_step in (0, 1, 1, 2):  # two micro-batches a step; global_step moves after the second
        trainer.global_step = global_step
        cb.on_train_batch_end(trainer, None, None, batch, 0)
    assert lines() == [(2 * 3 * 4 * 10, None), (2 * 3 * 4 * 10, None)]


@pytest.mark.parametrize(
    "batch", [torch.zeros(5, 2), [torch.zeros(5, 2), torch.zeros(5)], {"input_ids": torch.zeros(5, 2)}]
)
def test_lightning_counts_a_batch_by_its_first_tensors_leading_dimension(batch):
    assert lightning.batch_samples(batch) == 5
