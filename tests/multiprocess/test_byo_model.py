"""Your own model by `_target_` (issue 15): a package written outside the repo (here, to a temp
folder) sweeps at 1 and 2 ranks with ddp and fsdp, locally, with samples/tokens per second,
efficiency and MFU from counted FLOPs (on the dev cluster: tests/slurm/test_byo_model_slurm.py);
the `_target_` path with the built-in GPT as its target equals the built-in recipe (ddp and fsdp,
1e-6)."""

from __future__ import annotations

import socket
import subprocess
import sys

import numpy as np
import pandas as pd
import pytest
import torch

from launcher.cli import main
from launcher.config.compose import compose_config
from launcher.io import read_json
from launcher.train.models import build_model
from launcher.train.models.byo import counted_flops_per_token, tokens_per_sample, unit_modules
from tests.support.byo import DATA, GPT, MODELS, NET, SWEEP, user_package
from tests.support.layout_parity import assert_same, launch


@pytest.fixture(scope="module")
def user_code(tmp_path_factory):
    with user_package(
        tmp_path_factory.mktemp("user"), {"models": MODELS, "data": DATA}, {"byo_net": NET, "byo_gpt": GPT}
    ) as root:
        yield root


def test_the_recipe_keeps_its_kwargs_beside_target(user_code):
    cfg = compose_config(["model=byo_net", "model.width=16"])
    assert (cfg.model.name, cfg.model._target_) == ("byo_net", "byo_pkg.models.build")
    assert cfg.model.kwargs == {"vocab": 100, "width": 16}
    gpt = compose_config(["model=byo_gpt", "model.n_layers=2"]).model  # a built-in key: the callable's here
    assert gpt.kwargs == {"arch": "gpt", "vocab_size": 256, "seq_len": 64, "d_model": 128, "n_layers": 2, "n_heads": 8}
    assert gpt.n_heads == 4  # ModelConfig's default, unused: the recipe's 8 went to the callable
    assert tokens_per_sample(cfg.model) == 16
    model = build_model(compose_config(["model=byo_net"]).model, seed=0)  # width 32
    assert [type(m).__name__ for m in unit_modules(model, cfg.parallel)] == []  # 1e6 parameters: none here
    # Bottom-up: each Block (4288; its Linears, 2112 and 2080, are under 4000), not the embedding (3200) or head (330).
    units = unit_modules(model, compose_config(["model=byo_net", "parallel.fsdp_min_params=4000"]).parallel)
    assert [type(m).__name__ for m in units] == ["Block", "Block"]
    units = unit_modules(model, compose_config(["model=byo_net", "parallel.fsdp_min_params=3000"]).parallel)
    assert [type(m).__name__ for m in units] == ["Embedding", "Block", "Block"]  # children before parents


def test_initial_values_follow_the_seed_not_the_build(user_code):
    """Known module types from (seed, name); the rest (Block.gain) from the CPU reference build."""
    m = compose_config(["model=byo_net"]).model
    a, b = build_model(m, seed=5).state_dict(), build_model(m, seed=5).state_dict()
    assert all(torch.equal(a[k], b[k]) for k in a)
    assert torch.equal(a["blocks.0.gain"], torch.full((32,), 0.5))
    assert not torch.equal(a["emb.weight"], build_model(m, seed=6).state_dict()["emb.weight"])


def test_local_sweep_ddp_and_fsdp_at_1_and_2_ranks(user_code, tmp_path):
    assert (
        main(["sweep", *SWEEP, "parallel=ddp,fsdp", f"sweep.results_dir={tmp_path}", "sweep.name=byo", "--quiet"]) == 0
    )
    df = pd.read_csv(tmp_path / "byo" / "results.csv")
    assert (df["status"] == "completed").all() and sorted(df["world_size"]) == [1, 1, 2, 2]
    assert (df["samples_per_s"] > 0).all()
    np.testing.assert_allclose(df["tokens_per_s"], df["samples_per_s"] * 16, rtol=1e-12)  # 16 token ids a sample
    assert df.loc[df["world_size"] == 1, "efficiency"].tolist() == [1.0, 1.0]
    assert df["efficiency"].notna().all()
    fpt = counted_flops_per_token(compose_config(SWEEP).model, 4)
    np.testing.assert_allclose(df["mfu"], df["tokens_per_s"] * fpt / (1e11 * df["world_size"]), rtol=1e-9)
    records = {
        (r["trial"]["layout"], r["trial"]["world_size"]): r["metrics"]
        for r in (read_json(p) for p in (tmp_path / "byo" / "trials").glob("*/record.json"))
    }
    assert {m["flops_per_token"] for m in records.values()} == {fpt}
    for n in (1, 2):  # the same model, data and initial values whatever the layout
        np.testing.assert_allclose(records[("fsdp", n)]["losses"], records[("ddp", n)]["losses"], rtol=1e-6)
    # Planned from this sweep, a sample still counts 16 tokens (not the built-in default seq_len 64).
    plan = tmp_path / "plan.csv"
    assert main(["plan", "--from", str(tmp_path / "byo"), "--gpus", "1,2", "--output", str(plan)]) == 0
    planned = pd.read_csv(plan).set_index("gpus")
    # What this holds: a planned sample counts the 16 tokens the sweep measured (a plan that fell back to the
    # built-in seq_len 64 reads 4× here). How near the planned rate comes to a measured one is no test (a
    # timed check failed CI on a busy 2-core host): benchmarks/byo_plan_accuracy.py, over 5 runs with spread.
    measured_per_sample = set((df["tokens_per_s"] / df["samples_per_s"]).round(9))
    assert measured_per_sample == {16.0}
    planned_per_sample = planned["tokens_per_s"] * planned["step_time_median_s"] / planned["global_batch"]
    np.testing.assert_allclose(planned_per_sample, 16.0, rtol=1e-9)


# Megatron's split of TokenModel's blocks, as a recipe's plan: whole heads and hidden units per rank.
TP_PLAN = (
    "parallel.tp_plan={blocks.*.attn.q: colwise, blocks.*.attn.k: colwise, blocks.*.attn.v: colwise, "
    "blocks.*.attn.proj: rowwise, blocks.*.ffn.0: colwise, blocks.*.ffn.2: rowwise}"
)
SPLITS = {
    "ddp": ["batch.micro=4"],
    "fsdp": ["batch.micro=2", "batch.accum=2", "parallel.fsdp_units=[Block]"],
    "tp": ["batch.micro=8", TP_PLAN],
}


@pytest.mark.parametrize("layout", ["ddp", "fsdp", "tp"])
def test_builtin_gpt_as_target_equals_the_builtin_recipe(user_code, parity_ref, layout, tmp_path):
    """Same losses and parameters (1e-6) at 2 ranks as the built-in recipe at 1: the `_target_`
    build, initial values, dict batches, loss; FSDP units by class name with accumulation; the
    recipe's TP plan."""
    data = [
        "data=dataset",
        "data._target_=byo_pkg.data.ShiftedRows",
        "+data.num_samples=40",
        "+data.seq_len=64",
        "+data.vocab_size=256",
        "+data.seed=11",
    ]
    run = launch(tmp_path, layout, 2, ["model=byo_gpt", f"parallel={layout}", *SPLITS[layout], *data])
    assert_same(run, parity_ref)  # the built-in recipe, 1 process (tests/conftest.py)


RESUME = """
import dataclasses, os, sys, torch, torch.distributed as dist
from pathlib import Path
from launcher.config.compose import compose_config
from launcher.trials.spec import make_trial
from launcher.train.env import process_env
from launcher.train.loop import train

env = {"RANK": "0", "LOCAL_RANK": "0", "WORLD_SIZE": "1", "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": sys.argv[2]}
os.environ.update(env)
dist.init_process_group("gloo", rank=0, world_size=1)
cfg = compose_config(["model=byo_net", "optim=sgd", "batch.micro=4", "parallel=fsdp", "parallel.fsdp_units=[Block]",
                      "model.activation_checkpointing=full"])
trial = dataclasses.replace(make_trial(cfg, index=0, world_size=1, steps=6, warmup_steps=1), checkpoint=True,
                            checkpoint_every=2)
run = lambda: train(trial, cfg, process_env(env), torch.device("cpu"), checkpoint_dir=Path(sys.argv[1]),
                    log=lambda *a, **k: None)["metrics"]
whole, again = run(), run()  # the second resumes from the first's last checkpoint (step 4)
print(whole["losses"][4:] == again["losses"], again["resumed_from_step"])
dist.destroy_process_group()
"""


def test_fsdp_resume_with_full_checkpointing_continues_exactly(user_code, tmp_path):
    """Checkpoint/resume as for built-in models (one process: the layout's state, not the ranks, is what is tested)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    (tmp_path / "resume.py").write_text(RESUME)
    out = subprocess.run(
        [sys.executable, str(tmp_path / "resume.py"), str(tmp_path / "ckpt"), str(port)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.stdout.split() == ["True", "4"], out.stderr[-2000:]


def test_plan_on_presets_counts_a_target_models_flops_and_parameters(user_code, tmp_path, capsys):
    """`launcher plan` for a `_target_` model: compute from the counted FLOPs (no formula describes
    it), MFU from the same count, and a layout presets cannot model refused in one line."""
    out = tmp_path / "plan.csv"
    argv = [
        "plan",
        "model=byo_net",
        "batch.micro=4",
        "parallel=fsdp",
        "cluster=example_gpu_site",
        "--gpus",
        "8,16",
        "--output",
        str(out),
    ]
    assert main(argv) == 0
    m = compose_config(["model=byo_net"]).model
    flops = counted_flops_per_token(m, 4)
    assert f"{flops:.3g} FLOPs/token counted" in capsys.readouterr().out
    df = pd.read_csv(out).set_index("gpus")
    assert (df["status"] == "predicted").all()
    np.testing.assert_allclose(df["mfu"], df["tokens_per_s_per_device"] * flops / 3.12e14, rtol=1e-9)
    tp = ["parallel=tp", "parallel.tp_plan={blocks.*.fc1: colwise, blocks.*.fc2: rowwise}"]
    assert main(["plan", "model=byo_net", *tp, "cluster=example_gpu_site", "--gpus", "8"]) == 2
    assert capsys.readouterr().err == (
        "launcher: error: launcher plan on presets models a `_target_` model under ddp or "
        "fsdp or hsdp only, not parallel.layout=tp; measure it with a sweep and plan --from that\n"
    )


def test_a_target_model_is_not_given_a_memory_estimate_from_the_builtin_defaults(user_code):
    """No estimate rather than tiny_gpt's: even 1 byte of room predicts no OOM for it."""
    from launcher.perf.memory import predicted_oom
    from launcher.trials.spec import make_trial

    cfg = compose_config(["model=byo_net", "cluster.device_memory_gb=0.000001"])
    trial = make_trial(cfg, index=0, world_size=1, steps=4, warmup_steps=1)
    assert predicted_oom(cfg, trial, gpu=True, host_bytes=1.0) is None
    builtin = compose_config(["cluster.device_memory_gb=0.000001"])
    assert predicted_oom(
        builtin, make_trial(builtin, index=0, world_size=1, steps=4, warmup_steps=1), gpu=True, host_bytes=1.0
    ).startswith("oom (predicted): ")
