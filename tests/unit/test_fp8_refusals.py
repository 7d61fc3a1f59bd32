"""precision=fp8 where it cannot train: one line, exit 2, nothing created, before any trial on CPU
ranks (cluster.device=cpu, the dev cluster, or `auto` on a machine without CUDA) and under tensor
parallel; in the payload on a GPU older than compute capability 8.9; for a `_target_` model; and
without torchao installed. The GPU path itself (torchao's float8 layers) is not run here: no fp8 GPU."""

from __future__ import annotations

import pytest
import torch

from launcher.cli import main
from launcher.config.compose import compose_config
from launcher.config.errors import ConfigError
from launcher.layouts import layout_names
from launcher.train import float8, loop
from launcher.train.models import build_model

CPU_MESSAGE = (
    "precision=fp8 needs an NVIDIA GPU of compute capability ≥ 8.9 (H100, L40S, B200), but the ranks run on cpu "
    "(cluster.device, or no GPU found); use precision=bf16 (or fp32)"
)


@pytest.mark.parametrize(
    "overrides",
    [["cluster.device=cpu"], ["cluster=devcluster"], []],  # [] : cluster=local, device auto, no CUDA here
    ids=["cpu", "devcluster", "local-auto"],
)
def test_fp8_on_cpu_ranks_is_one_line_exit_2_nothing_created(overrides, tmp_path, capsys):
    if not overrides and torch.cuda.is_available():
        pytest.skip("this machine has CUDA: `auto` would get a GPU")
    results = tmp_path / "results"
    assert main(["sweep", "precision=fp8", *overrides, f"sweep.results_dir={results}"]) == 2
    assert capsys.readouterr().err == f"launcher: error: {CPU_MESSAGE}\n"
    assert not results.exists()


def test_fp8_under_tensor_parallel_is_refused_before_any_trial_but_planned(tmp_path, capsys):
    results = tmp_path / "results"
    args = ["precision=fp8", "parallel=fsdp_tp", "parallel.tp=2", "cluster.device=cuda"]
    assert main(["sweep", *args, f"sweep.results_dir={results}"]) == 2
    can = layout_names(lambda t: not t.splits("tp"))  # the rows without tensor parallel, as the table grows
    assert {"ddp", "fsdp"} <= set(can) and not {"tp", "fsdp_tp", "fsdp_tp_pp"} & set(can)
    assert capsys.readouterr().err == (
        f"launcher: error: precision=fp8 trains under {' or '.join(f'parallel={n}' for n in can)}, not "
        "parallel=fsdp_tp: tensor parallel would need torchao's float8 TP styles, which the engines do not apply; "
        "`launcher plan` still models it\n"
    )
    assert not results.exists()
    assert main(["plan", *args, "cluster=example_gpu_site", "cluster.device_name=H100 SXM", "--gpus", "16"]) == 0


def test_the_payload_refuses_fp8_on_a_gpu_older_than_8_9_and_takes_it_on_an_h100(monkeypatch):
    cfg = compose_config(["precision=fp8"])
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda device=None: "NVIDIA A100-SXM4-80GB")
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda device=None: (8, 0))
    with pytest.raises(ConfigError) as raised:
        loop.with_precision(cfg, torch.device("cuda", 0))
    assert str(raised.value) == (
        "precision=fp8 needs a GPU of compute capability ≥ 8.9 (fp8 tensor cores), but NVIDIA A100-SXM4-80GB is "
        "8.0; use precision=bf16 (or fp32)"
    )
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda device=None: (9, 0))
    assert loop.with_precision(cfg, torch.device("cuda", 0)).precision == "fp8"
    # On a CPU rank (cluster.device=auto that found none) the payload refuses it too.
    with pytest.raises(ConfigError, match="but the ranks run on cpu"):
        loop.with_precision(cfg, torch.device("cpu"))


def test_fp8_refuses_a_target_model_at_config_time():
    with pytest.raises(ConfigError) as raised:
        compose_config(["model=target", "model._target_=mypkg.build", "model.inputs={x:{shape:[4]}}", "precision=fp8"])
    assert str(raised.value) == (
        "precision=fp8 converts the built-in models' linear layers; model._target_='mypkg.build' is not one; "
        "use precision=bf16 (or fp32), or convert your model's layers to float8 yourself"
    )


def test_fp8_without_torchao_says_how_to_install_it_and_picks_only_block_linears():
    cfg = compose_config(["model=tiny_llama", "precision=fp8", "parallel=fsdp"])
    model = build_model(cfg.model)
    try:
        import torchao  # noqa: F401  # lazy: only to know whether this machine has the extra
    except ImportError:
        with pytest.raises(ConfigError) as raised:
            float8.convert(model, cfg)
        assert str(raised.value) == (
            "precision=fp8 needs torchao (torchao.float8), which is not installed here; "
            "pip install 'launcher[fp8]', or use precision=bf16"
        )
    picked = [name for name, module in model.named_modules() if float8.wants_fp8(name, module)]
    linears = [name for name, module in model.named_modules() if isinstance(module, torch.nn.Linear)]
    # Every block linear whose widths are multiples of 16; never the head.
    assert "head" in linears and "head" not in picked
    assert picked == [
        n
        for n in linears
        if n.startswith("blocks.")
        and model.get_submodule(n).in_features % 16 == 0
        and model.get_submodule(n).out_features % 16 == 0
    ]
    assert picked  # tiny_llama's widths are multiples of 16
