"""The worked examples in examples/ sweep through the real CLI exactly as the README tells a user:
the example's folder on PYTHONPATH, its recipes by --recipes, the model by name. Each sweep runs
once (a module fixture) and the tests read its table."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

pytestmark = pytest.mark.torch_dist

REPO = Path(__file__).resolve().parents[2]
EXAMPLES = REPO / "examples"
LAUNCHER = Path(sys.executable).parent / "launcher"
FEW_STEPS = ["sweep.steps=4", "sweep.warmup_steps=2"]


def _sweep(example: str, tmp: Path, *overrides: str, sizes: str = "[1,2]") -> tuple[pd.DataFrame, str]:
    """`launcher sweep --recipes examples/<example>/recipes ...` with the example's package on
    PYTHONPATH, as a user runs it; its results table and what it printed."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(EXAMPLES / example), os.environ.get("PYTHONPATH", "")])}
    cmd = [
        str(LAUNCHER),
        "sweep",
        "--recipes",
        str(EXAMPLES / example / "recipes"),
        *overrides,
        *FEW_STEPS,
        f"sweep.world_sizes={sizes}",
        f"sweep.results_dir={tmp}",
        "sweep.name=example",
    ]
    done = subprocess.run(cmd, env=env, cwd=tmp, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, f"{' '.join(cmd)} exited {done.returncode}:\n{done.stdout}\n{done.stderr}"
    return pd.read_csv(tmp / "example" / "results.csv"), done.stdout


def _assert_scales(rows: pd.DataFrame, throughput: str) -> None:
    """Rows at 1 and 2 ranks, completed, efficiency = thr(2) / (2 · thr(1)) of `throughput`."""
    assert rows["world_size"].tolist() == [1, 2]
    assert rows["status"].tolist() == ["completed", "completed"], rows["reason"].tolist()
    assert (rows[throughput] > 0).all()
    assert rows["efficiency"].iloc[0] == 1.0
    assert rows["efficiency"].iloc[1] == pytest.approx(
        rows[throughput].iloc[1] / (2 * rows[throughput].iloc[0]), rel=1e-3
    )
    assert (rows["loss_first"] > 0).all() and rows["loss_last"].notna().all()


@pytest.fixture(scope="module")
def resnet(tmp_path_factory) -> tuple[pd.DataFrame, str]:
    return _sweep(
        "resnet",
        tmp_path_factory.mktemp("resnet"),
        "model=resnet",
        "parallel=ddp,fsdp",
        "parallel.fsdp_units=[BasicBlock]",
        "batch.micro=4",
    )


@pytest.fixture(scope="module")
def hf_causal_lm(tmp_path_factory) -> tuple[pd.DataFrame, str]:
    missing = [m for m in ("transformers",) if importlib.util.find_spec(m) is None]
    assert not missing, (
        f"{missing} not installed: the examples need the test extra, pip install -e '.[cpu,test]' (pyproject.toml)"
    )
    return _sweep("hf_causal_lm", tmp_path_factory.mktemp("hf"), "model=hf_llama", "batch.micro=4")


@pytest.mark.parametrize("layout", ["ddp", "fsdp"])
def test_resnet_sweeps_at_1_and_2_ranks_in_samples_per_second(resnet, layout):
    df, _ = resnet
    rows = df[df["layout"] == layout].sort_values("world_size")
    _assert_scales(rows, "samples_per_s")
    # no integer input, so no tokens: a sample counts as one, and tokens/s is samples/s
    assert rows["tokens_per_s"].tolist() == pytest.approx(rows["samples_per_s"].tolist())
    assert rows["global_batch"].tolist() == [4, 8]


def test_resnet_table_prints_each_layout_and_a_recommendation(resnet):
    df, out = resnet
    assert sorted(df["layout"].unique()) == ["ddp", "fsdp"] and len(df) == 4
    assert out.count("│ completed │") == 4
    assert "Recommended world size:" in out


def test_resnet_trains_on_its_dataset_by_target(resnet, tmp_path):
    # 1 rank: what is checked is that the example's dataset feeds the model, not the sharding
    df, _ = _sweep(
        "resnet",
        tmp_path,
        "model=resnet",
        "data=dataset",
        "data._target_=resnet_example.data.make",
        "data.size=64",
        "batch.micro=4",
        sizes="[1]",
    )
    assert df["status"].tolist() == ["completed"], df["reason"].tolist()
    assert df["samples_per_s"].iloc[0] > 0 and df["global_batch"].tolist() == [4]
    # the same model and seed as the synthetic sweep: only the data differs, and so does the first loss
    synthetic = resnet[0].query("layout == 'ddp' and world_size == 1")["loss_first"].iloc[0]
    assert df["loss_first"].iloc[0] != pytest.approx(synthetic, rel=1e-3)


def test_hf_causal_lm_sweeps_at_1_and_2_ranks_in_tokens_per_second(hf_causal_lm):
    df, out = hf_causal_lm
    rows = df.sort_values("world_size")
    assert rows["layout"].tolist() == ["ddp", "ddp"]
    _assert_scales(rows, "tokens_per_s")
    # input_ids is the first integer input: 64 tokens a sample
    assert rows["tokens_per_s"].tolist() == pytest.approx((rows["samples_per_s"] * 64).tolist())
    assert out.count("│ completed │") == 2
