"""trainer.grad_sync_16bit (Apex DistributedFusedAdam's grad_sync_dtype=bf16, which NeMo-Framework-Launcher's
H100 examples pass): the distributed optimizer's gradient buffer holds 2 bytes a parameter and the
data-parallel reduce moves half the bytes; without the distributed optimizer it is refused in one line, and
the built-in trainer refuses it as it refuses the other trainers' settings."""

from __future__ import annotations

import csv

import pytest

from benchmarks.replay_mapping import map_row
from benchmarks.search_corpus import CORPUS
from launcher.compute import flops
from launcher.config.builtin_support import builtin_lacks
from launcher.config.compose import compose_config
from launcher.config.errors import ConfigError
from launcher.perf import memory
from launcher.perf.memory import FP32, GIB, estimate
from launcher.perf.memory_limit import limit_of
from launcher.perf.shapes import shape_for
from launcher.trials.spec import make_trial

MEGATRON = [
    "model=llama3_8b",
    "precision=bf16",
    "cluster.device=cuda",
    "batch.micro=1",
    "parallel=fsdp",
    "trainer.distributed_optimizer=true",
]


def _estimate(overrides: list[str], world_size: int):
    cfg = compose_config(overrides)
    trial = make_trial(cfg, index=0, world_size=world_size, steps=1, warmup_steps=0)
    n = memory.rank_params(flops.model_parts(cfg.model), cfg.model, trial, 0)[0]
    return n, estimate(cfg, trial, "cuda")


def test_the_gradient_buffer_holds_two_bytes_a_parameter():
    n, fp32 = _estimate(MEGATRON, 8)
    _, bf16 = _estimate([*MEGATRON, "trainer.grad_sync_16bit=true"], 8)
    assert fp32.grads == n * FP32
    assert bf16.grads == n * 2
    assert (bf16.params, bf16.optimizer, bf16.activations) == (fp32.params, fp32.optimizer, fp32.activations)


def test_the_data_parallel_reduce_moves_half_the_bytes():
    fp32 = shape_for(compose_config(MEGATRON), 8).traffic
    bf16 = shape_for(compose_config([*MEGATRON, "trainer.grad_sync_16bit=true"]), 8).traffic
    assert fp32.grad_bytes == 2 * bf16.grad_bytes > 0
    assert fp32.param_bytes == bf16.param_bytes


def test_without_the_distributed_optimizer_it_is_one_line():
    with pytest.raises(ConfigError) as err:
        compose_config(["trainer.grad_sync_16bit=true"])
    assert str(err.value) == (
        "trainer.grad_sync_16bit=true describes the 16-bit gradient buffer of Megatron's distributed optimizer; "
        "add trainer.distributed_optimizer=true, or drop it"
    )


def test_the_built_in_trainer_refuses_it():
    assert "trainer.grad_sync_16bit=true" in builtin_lacks(compose_config([*MEGATRON, "trainer.grad_sync_16bit=true"]))


def test_nemos_gpt3_20b_fp8_at_64_gpus_fits_as_it_ran():
    """NeMo 24.07's GPT3-20B row (tp 2, micro batch 2, fp8, 64 H100s) was estimated at 78.6 GiB of 76.0 usable
    with a float32 gradient buffer; its launcher example passes grad_sync_dtype=bf16."""
    with open(CORPUS, newline="") as f:
        (row,) = [r for r in csv.DictReader(f) if r["source"] == "nemo_perf_2407" and r["model"] == "GPT3-20B"]
    mapped = map_row(row)
    assert "trainer.grad_sync_16bit=true" in mapped.overrides
    cfg = compose_config(mapped.overrides)
    need = estimate(cfg, make_trial(cfg, index=0, world_size=mapped.gpus, steps=1, warmup_steps=0), "cuda")
    assert limit_of(cfg).fits(need.total), f"{need.total / GIB:.1f} GiB"
