"""Memory that reflects the layout, not the harness: the per-rank estimate made before anything
runs (launcher/perf/memory.py) and what it refuses. Real trials: tests/multiprocess/test_memory_trials.py."""

from __future__ import annotations

import subprocess

import pytest

from launcher.cli import main
from launcher.compute import flops
from launcher.config.compose import compose_config
from launcher.io import read_json
from launcher.perf import memory
from launcher.perf import memory_activations as act
from launcher.perf.memory import GIB, estimate, model_parts, predicted_oom, room, slurm_mem_bytes
from launcher.trials.spec import make_trial

HOST_24G = 23.5 * GIB  # this machine's MemTotal, about


def trial_of(overrides: list[str], world_size: int):
    cfg = compose_config(overrides)
    return cfg, make_trial(cfg, index=0, world_size=world_size, steps=10, warmup_steps=2)


@pytest.mark.parametrize("recipe", ["tiny_gpt", "mlp", "gpt_125m", "gpt_1_3b", "tiny_llama", "llama3_8b"])
def test_the_parts_add_up_to_the_counted_model(recipe):
    cfg = compose_config([f"model={recipe}"])
    p = model_parts(cfg.model)
    assert p.embedding + cfg.model.n_layers * p.block + p.final_norm + p.head == flops.param_counts(cfg.model)[0]


def test_ddp_on_one_rank_counts_params_grads_buckets_and_adam_in_fp32():
    cfg, t = trial_of(["model=gpt_1_3b", "precision=fp32"], 1)
    need = estimate(cfg, t)
    n = flops.param_counts(cfg.model)[0]
    assert (need.params, need.grads, need.optimizer) == (4 * n, 8 * n, 8 * n)  # grads + DDP's bucket copy
    assert need.activations > 0 and need.runtime == memory.RUNTIME_BYTES["cpu"]


def test_fsdp_shards_what_ddp_replicates_and_the_shard_shrinks_with_dp():
    ddp = estimate(*trial_of(["model=gpt_1_3b", "precision=fp32"], 8))
    fsdp = [estimate(*trial_of(["model=gpt_1_3b", "precision=fp32", "parallel=fsdp"], ws)) for ws in (2, 8)]
    assert fsdp[1].optimizer == pytest.approx(ddp.optimizer / 8)
    assert fsdp[0].total > fsdp[1].total and ddp.total > fsdp[1].total
    assert fsdp[1].activations == ddp.activations  # the same micro-batch per rank


def test_fsdp_accumulating_keeps_unsharded_gradients_unless_each_micro_step_syncs():
    base = ["model=gpt_1_3b", "precision=fp32", "parallel=fsdp", "batch.micro=2"]
    n = flops.param_counts(compose_config(base).model)[0]
    one = estimate(*trial_of(base, 8))
    held = estimate(*trial_of([*base, "batch.accum=4"], 8))
    each = estimate(*trial_of([*base, "batch.accum=4", "parallel.fsdp_sync_each_microstep=true"], 8))
    assert held.grads == pytest.approx(4 * n / 8 + 4 * n)  # the shard + the whole unsharded gradient
    assert each.grads == one.grads < held.grads / 3  # the shard + the units in backward, as without accumulation
    assert (each.params, each.optimizer, each.activations) == (held.params, held.optimizer, held.activations)


def test_an_fsdp_pipeline_stage_holds_its_stage_gathered_and_its_gradients_unsharded():
    cfg, t = trial_of(["model=gpt_1_3b", "precision=fp32", "parallel=fsdp_pp", "parallel.pp=2", "batch.micro=4"], 4)
    stage = max(memory.rank_params(model_parts(cfg.model), cfg.model, t, r)[0] for r in (0, 1))
    need = estimate(cfg, t)
    assert need.grads == pytest.approx(4 * stage / 2 + 4 * stage)  # dp=2 shard + unsharded
    assert need.params == pytest.approx(4 * stage / 2 + 4 * stage)  # fp32: no 16-bit copy


def test_pipeline_and_tp_ranks_hold_their_part():
    full = estimate(*trial_of(["model=gpt_1_3b", "precision=fp32", "parallel=pipeline", "batch.micro=4"], 1))
    staged = estimate(*trial_of(["model=gpt_1_3b", "precision=fp32", "parallel=pipeline", "batch.micro=4"], 4))
    assert staged.params < full.params / 2 and staged.activations < full.activations
    tp = estimate(*trial_of(["model=gpt_1_3b", "precision=fp32", "parallel=tp"], 4))
    assert tp.params < full.params / 3


def test_the_new_users_gpt_1_3b_on_a_24g_cpu_machine_is_refused_with_the_numbers():
    cfg, t = trial_of(["model=gpt_1_3b"], 1)
    reason = predicted_oom(cfg, t, gpu=False, host_bytes=HOST_24G)
    assert reason is not None and reason.startswith("oom (predicted): estimate 90.1 GiB > 23.5 GiB × (1 − 5% margin)")
    assert "per rank (params " in reason and "grads " in reason and "optimizer " in reason and "activations " in reason
    assert "(host memory 23.5 GiB (this machine's MemTotal)); needs ~" in reason
    cfg2, t2 = trial_of(["model=gpt_1_3b"], 2)  # two local ranks share the host
    shared = "> 11.8 GiB × (1 − 5% margin) (host memory 23.5 GiB (this machine's MemTotal), shared by 2 ranks)"
    assert shared in predicted_oom(cfg2, t2, gpu=False, host_bytes=HOST_24G)


def test_small_models_fit_and_unknown_room_checks_nothing():
    for recipe in ("tiny_gpt", "mlp"):
        assert predicted_oom(*trial_of([f"model={recipe}"], 4), gpu=False, host_bytes=HOST_24G) is None
    cfg, t = trial_of(["model=gpt_1_3b", "cluster.device=cuda"], 1)
    assert room(cfg, t, gpu=True, host_bytes=HOST_24G) is None  # no cluster.device_memory_gb: unknown
    assert predicted_oom(cfg, t, gpu=True, host_bytes=HOST_24G) is None


def test_gpu_trials_are_judged_against_device_memory():
    over = ["model=gpt_1_3b", "precision=fp32", "cluster.device=cuda", "cluster.device_memory_gb=80", "batch.micro=8"]
    cfg, t = trial_of(over, 1)
    assert "> 80.0 GiB × (1 − 5% margin) (cluster.device_memory_gb)" in predicted_oom(cfg, t, gpu=True, host_bytes=None)
    cfg, t = trial_of(over[:-1] + ["batch.micro=1", "parallel=fsdp"], 8)
    assert predicted_oom(cfg, t, gpu=True, host_bytes=None) is None


def measured_saved_bytes_per_token(model_cfg, mixed: bool, pure: bool = False) -> float:
    """What one built block really saves for backward per token (torch's saved-tensor hooks;
    every distinct storage once, the block's input included). A batch of 3 tells activations
    (leading dim 3, or 3·seq rows once flattened for a matmul) from weights and their bf16 casts.
    `pure`: the block's parameters and input in bf16, no autocast (FSDP's MixedPrecisionPolicy)."""
    import torch

    from launcher.train.models import build_model

    batch = 3
    block = build_model(model_cfg, seed=1).blocks[0]
    dtype = torch.bfloat16 if pure else torch.float32
    block = block.to(dtype)
    x = torch.randn(batch, model_cfg.seq_len, model_cfg.d_model, requires_grad=True, dtype=dtype)
    saved: dict[int, int] = {}

    def pack(t):
        if t.shape[0] in (batch, batch * model_cfg.seq_len):
            saved[t.untyped_storage().data_ptr()] = t.untyped_storage().nbytes()
        return t

    ctx = torch.autocast("cpu", dtype=torch.bfloat16) if mixed and not pure else torch.autocast("cpu", enabled=False)
    with ctx, torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        block(x)
    return sum(saved.values()) / (batch * model_cfg.seq_len)


@pytest.mark.parametrize("mixed", [False, True], ids=["fp32", "mixed"])
def test_llama_saved_activations_match_what_a_block_saves(mixed):
    """The estimate's per-token bytes against a real tiny-llama block (GQA, SwiGLU): within 3%
    (per-head softmax statistics and the rotary tables are left out of the estimate)."""
    m = compose_config(["model=tiny_llama"]).model
    assert act.saved_bytes_per_token(m, mixed) == pytest.approx(measured_saved_bytes_per_token(m, mixed), rel=0.03)


@pytest.mark.parametrize("recipe", ["tiny_llama", "tiny_gpt", "mlp"])
def test_16bit_parameters_save_what_a_bf16_block_saves(recipe):
    """FSDP's MixedPrecisionPolicy runs the blocks with bf16 parameters and no autocast: the
    estimate's per-token bytes against such a block, within 5% above it (at most 1% under: the
    per-row statistics llama's formula leaves out)."""
    m = compose_config([f"model={recipe}"]).model
    measured = measured_saved_bytes_per_token(m, True, pure=True)
    assert 0.99 * measured <= act.saved_bytes_per_token(m, True, pure=True) <= 1.05 * measured


def test_fsdp_mixed_precision_is_counted_as_16bit_parameters_and_a_pipeline_as_autocast():
    base = ["model=llama3_8b", "precision=bf16", "cluster.device=cuda", "batch.micro=1"]
    m, tokens = compose_config(base).model, 8192
    fsdp = estimate(*trial_of([*base, "parallel=fsdp"], 8), "cuda")
    ddp = estimate(*trial_of(base, 8), "cuda")
    assert fsdp.activations == 32 * tokens * act.saved_bytes_per_token(m, True, pure=True) + tokens * 14 * m.vocab_size
    assert fsdp.activations < ddp.activations


def test_checkpointing_full_keeps_block_inputs_and_selective_keeps_what_fused_attention_keeps():
    base = ["model=llama3_8b", "precision=bf16", "cluster.device=cuda", "batch.micro=1"]
    none, selective, full = (
        estimate(*trial_of(base + [f"model.activation_checkpointing={ac}"], 8), "cuda")
        for ac in ("none", "selective", "full")
    )
    assert selective.activations == none.activations
    m, tokens = compose_config(base).model, 8192
    logits = tokens * act.LOGIT_BYTES["mixed"] * m.vocab_size
    per_block = act.saved_bytes_per_token(m, True)
    assert none.activations == 32 * tokens * per_block + logits
    # The recomputed block (in its own backward) and the logits (freed by the loss's backward) are never
    # held together: the larger of the two, here the logits, sits on the 32 kept block inputs.
    assert full.activations == 32 * tokens * 4 * m.d_model + max(tokens * per_block, logits)
    assert full.activations < none.activations / 3 and (full.params, full.grads) == (none.params, none.grads)


def test_slurm_mem_and_meminfo(tmp_path):
    assert slurm_mem_bytes("64G") == 64 * GIB and slurm_mem_bytes("500M") == 500 * 2**20
    assert slurm_mem_bytes("4000") == 4000 * 2**20 and slurm_mem_bytes("lots") is None
    info = tmp_path / "meminfo"
    info.write_text("MemTotal:       24684092 kB\nMemFree:  1 kB\n")
    assert memory.host_memory_bytes(info) == 24684092 * 1024


def test_bad_memory_sizes_are_config_errors(capsys):
    assert main(["sweep", "cluster.host_memory_gb=0"]) == 2
    err = capsys.readouterr().err
    assert "cluster.host_memory_gb=0.0 must be a positive number; set e.g. cluster.host_memory_gb=256" in err


def test_sweep_of_gpt_1_3b_here_is_refused_at_once_without_starting_a_rank(tmp_path, monkeypatch):
    """The new user's `launcher sweep model=gpt_1_3b`: every size a predicted oom row, no trial
    process started, exit 1 as for a sweep where nothing completed."""

    def no_process(*args, **kwargs):
        raise AssertionError(f"a trial process was started: {args[0]}")

    monkeypatch.setattr(subprocess, "Popen", no_process)
    code = main(
        [
            "sweep",
            "model=gpt_1_3b",
            "cluster.host_memory_gb=23.5",
            f"sweep.results_dir={tmp_path}",
            "sweep.name=big",
            "--quiet",
        ]
    )
    assert code == 1
    rows = (tmp_path / "big" / "results.csv").read_text()
    for tdir in sorted((tmp_path / "big" / "trials").iterdir()):
        outcome = read_json(tdir / "outcome.json")
        assert (outcome["status"], outcome["predicted"], outcome["final"]) == ("oom", True, True)
        reason = outcome["reason"]
        assert reason.startswith("oom (predicted): estimate ") and "cluster.host_memory_gb" in reason
        assert not list(tdir.glob("rank*.log")) and not (tdir / "record.json").exists()
    assert rows.count(",oom,") == 2 and rows.count("oom (predicted): estimate ") == 2


def test_a_command_trial_is_estimated_only_where_its_recipe_describes_the_program():
    # An 8B program on one 80 GB GPU: the built-in trainer's DDP with AdamW cannot hold it (16 B/param = 128 GB).
    words = ["job=command", "job.argv=[python,train.py]", "model=llama3_8b", "cluster.device_memory_gb=80"]
    cfg, t = trial_of(words, 1)
    assert predicted_oom(cfg, t, gpu=True, host_bytes=HOST_24G) is None  # the recipe says nothing of its layout
    cfg, t = trial_of([*words, "job.model_describes_program=true"], 1)
    reason = predicted_oom(cfg, t, gpu=True, host_bytes=HOST_24G)
    assert reason is not None
    assert reason.startswith("oom (predicted from the recipe's model and layout (job.model_describes_program)): ")
