"""The full model is gathered only when parameters are asked for (--save-params, the parity
tests): a trial without the flag never calls engine.full_state_dict(), whose gather weighs what
the model does (a pipeline gathered every stage to rank 0, tensor parallel copied the whole
model to each rank's host, FSDP gathered fp32 to rank 0 — after every trial, before)."""

from __future__ import annotations

import pytest
import torch
import torch.distributed as dist

from launcher.config.compose import compose_config
from launcher.train import loop
from launcher.train.engines.ddp import DDPEngine
from launcher.train.env import RankEnv
from launcher.trials.spec import make_trial
from tests.support.layout_parity import STEPS, run_trial


@pytest.fixture(scope="module")
def group():
    dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
    yield
    dist.destroy_process_group()


def train_tiny(tmp_path, save_params):
    cfg = compose_config(["optim=sgd", "model.n_layers=1", "model.seq_len=16", "batch.micro=2"])
    trial = make_trial(cfg, index=0, world_size=1, steps=2, warmup_steps=1)
    renv = RankEnv(rank=0, local_rank=0, world_size=1, master_addr="127.0.0.1", master_port=0, sources={})
    return loop.train(trial, cfg, renv, torch.device("cpu"), save_params=save_params, log=lambda *a, **k: None)


def test_a_trial_without_save_params_never_gathers_the_model(group, tmp_path, monkeypatch):
    calls = []
    real = DDPEngine.full_state_dict
    monkeypatch.setattr(DDPEngine, "full_state_dict", lambda self: calls.append(1) or real(self))
    out = train_tiny(tmp_path, None)
    assert calls == [] and len(out["metrics"]["losses"]) == 2
    train_tiny(tmp_path, tmp_path / "params.pt")
    assert calls == [1]
    assert "head.weight" in torch.load(tmp_path / "params.pt")


@pytest.mark.torch_dist
def test_a_two_rank_pipeline_trial_without_the_flag_writes_no_params_and_a_complete_record(tmp_path):
    record = run_trial(tmp_path, "pipe", 2, ["parallel=pipeline"], save_params=False)
    assert not (tmp_path / "pipe" / "params.pt").exists()
    assert len(record["metrics"]["losses"]) == STEPS and record["metrics"]["layout"]["bubble_theory"] > 0
