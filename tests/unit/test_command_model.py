"""job.model_describes_program (issue 22): the model group describes the user's own model, so the row's
MFU and tokens per sample, and `launcher plan --from`'s gradient size, are counted from it. The check on
examples/ddp_meter is counted, not restated: the program is built from the very argv the launcher gives a
trial, and its own parameters (torch's count) and attention shape give 6N + 12·L·H·Q·T."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pandas as pd
import pytest
from torch import nn

from launcher.cli import main
from launcher.compute.flops import flops_per_token
from launcher.config.compose import compose_config
from launcher.io import atomic_write_json
from launcher.perf.calibrate import fit_layouts, load_measured
from launcher.train.command_record import finish
from launcher.trials.command import command_words
from launcher.trials.folder import write_trial
from launcher.trials.spec import sweep_trials

REPO = Path(__file__).resolve().parents[2]
EXAMPLE = REPO / "examples" / "ddp_meter"


def _example_module():
    spec = importlib.util.spec_from_file_location("ddp_meter_train", EXAMPLE / "train.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _programs_flops_per_token(model: nn.Module, seq_len: int) -> float:
    """6 × the program's own non-embedding parameters + 12·L·H·Q·T from its attention modules."""
    lookups = {id(p) for m in model.modules() if isinstance(m, nn.Embedding) for p in m.parameters()}
    n = sum(p.numel() for p in model.parameters() if id(p) not in lookups)
    attention = [m for m in model.modules() if isinstance(m, nn.MultiheadAttention)]
    cores = sum(12 * a.num_heads * a.head_dim * seq_len for a in attention)
    return float(6 * n + cores)


@pytest.mark.parametrize("model", [[], ["model.d_model=96", "model.n_layers=3", "model.n_heads=6", "model.seq_len=32"]])
def test_ddp_meters_recipe_counts_the_programs_own_flops(model):
    cfg = compose_config(["job=ddp_meter", "sweep.world_sizes=[2]", *model], EXAMPLE / "recipes")
    assert cfg.job.model_describes_program
    (trial,) = sweep_trials(cfg)
    from launcher.config.plain import to_dict  # lazy: only this test needs the config as a document

    argv, _ = command_words(cfg.job, trial, Path("/t"), to_dict(cfg))
    train = _example_module()
    args = train.parse(argv[2:])
    program = train.TinyGPT(
        vocab=args.vocab,
        width=args.width,
        layers=args.layers,
        seq_len=args.seq_len,
        heads=args.heads,
        ffn_mult=args.ffn_mult,
    )
    assert args.seq_len == cfg.model.seq_len
    assert flops_per_token(cfg.model) == _programs_flops_per_token(program, args.seq_len)


def _trial_dir(tmp_path: Path, *overrides: str) -> Path:
    argv = "job.argv=[python,train.py]"
    cfg = compose_config(["job=command", argv, "sweep.world_sizes=[2]", "sweep.warmup_steps=2", *overrides])
    (trial,) = sweep_trials(cfg)
    write_trial(tmp_path, trial, cfg)
    lines = [{"step": i + 1, "t": 10.0 + i / 2, "tokens": 1000, "samples": None} for i in range(6)]
    (tmp_path / "meter.jsonl").write_text("".join(json.dumps(x) + "\n" for x in lines))
    return tmp_path


def test_a_described_model_gives_the_rows_mfu_and_tokens_per_sample(tmp_path):
    peak = "cluster.peak_flops_per_device=1e12"
    m = finish(_trial_dir(tmp_path, "job.model_describes_program=true", peak), exit_code=0)["metrics"]
    fpt = flops_per_token(compose_config(["model=tiny_gpt"]).model)
    assert (m["flops_per_token"], m["tokens_per_sample"]) == (fpt, 64)
    assert m["mfu"] == pytest.approx(2000.0 * fpt / (1e12 * 2))
    assert m["samples_per_s"] == pytest.approx(2000.0 / 64)


def test_without_it_the_model_group_says_nothing_of_the_program(tmp_path):
    m = finish(_trial_dir(tmp_path, "cluster.peak_flops_per_device=1e12"), exit_code=0)["metrics"]
    assert (m["flops_per_token"], m["mfu"], m["tokens_per_sample"], m["samples_per_s"]) == (None, None, None, None)


def test_job_flops_per_token_wins_over_the_described_model(tmp_path):
    over = ("job.model_describes_program=true", "job.flops_per_token=1e6", "job.tokens_per_sample=8")
    m = finish(_trial_dir(tmp_path, *over), exit_code=0)["metrics"]
    assert (m["flops_per_token"], m["tokens_per_sample"]) == (1e6, 8)


def _command_sweep(tmp_path: Path, *overrides: str) -> Path:
    """A measured job=command sweep at 1 and 2 ranks: the program's step times, and at 2 ranks the
    link probe's three all-reduces (64 MiB and two smaller), as command_record writes them."""
    from launcher.run.sweep import create_sweep_dir, prepare_sweep  # lazy: only the plan tests need a sweep

    over = ["job=command", "job.argv=[python,-c,pass]", "sweep.world_sizes=[1,2]", *overrides]
    over += [f"sweep.results_dir={tmp_path}", "sweep.name=cmd"]
    plan = prepare_sweep(over)
    sweep_dir = create_sweep_dir(plan.cfg, plan.items, over)
    config = json.loads((sweep_dir / "sweep.json").read_text())["config"]
    for t, _ in plan.items:
        n, step = t.world_size, 0.05 + 0.01 * (t.world_size - 1)
        metrics = {"tokens_per_s": t.global_batch * 64 / step, "step_time_median_s": step, "tokens_per_sample": 64}
        if n > 1:
            points = [[n, b, 1e-4 + b / 1e9] for b in (2**20, 2**23, 2**26)]
            metrics |= {"allreduce_bytes": 2**26, "allreduce_of": "link_probe", "allreduce_probe": points}
        atomic_write_json(
            sweep_dir / "trials" / t.trial_id / "record.json",
            {"status": "completed", "metrics": metrics, "wall_s": 10.0, "config": config},
        )
    return sweep_dir


def test_plan_from_a_command_sweep_needs_its_model_described(tmp_path, capsys):
    sweep = _command_sweep(tmp_path)
    assert main(["plan", "--from", str(sweep), "--gpus", "4"]) == 2
    err = capsys.readouterr().err.strip()
    assert err == (
        f"launcher: error: --from {str(sweep)!r} ran job=command without job.model_describes_program, so its "
        "program's gradient size is unknown; sweep it with the program's model described (model=… or model.* "
        "overrides matching it, job.model_describes_program=true)"
    )


def test_plan_from_a_described_command_sweep_takes_the_links_from_the_probe(tmp_path):
    out = tmp_path / "plan.csv"
    sweep = _command_sweep(tmp_path, "job.model_describes_program=true")
    assert main(["plan", "--from", str(sweep), "--gpus", "1,2,4", "--output", str(out)]) == 0
    # The probe's points lie on 100 µs + bytes / 1 GB/s (the ring's 2(n−1)/n share is 1 at 2 ranks): the fit
    # finds that link (local ranks: the intra-node one), its α per hop (a ring of 2 pays 2 of them).
    measured = load_measured(sweep)
    link = fit_layouts(measured, "nvlink", "ib400")["ddp"].intra
    assert (link.bandwidth_gbps, link.latency_s) == (pytest.approx(1.0), pytest.approx(5e-5))
    plan = pd.read_csv(out).set_index("gpus")
    assert plan["status"].tolist() == ["predicted"] * 3 and plan.loc[4, "comm_share"] > 0
