"""The 3-D layout fsdp_tp_pp (dp × pp × tp, tp innermost) in real processes: on 8 ranks (dp 2 ×
pp 2 × tp 2) it equals the 1-process reference within 1e-6 (losses and gathered full parameters),
and its record carries what fsdp_pp and fsdp_tp record. Its rules: tests/unit/test_layouts_3d.py."""

from __future__ import annotations

import pytest

from launcher.io import read_json
from tests.support.layout_parity import assert_same, launch
from tests.unit.test_layouts_3d import THREE_D


@pytest.mark.torch_dist
def test_fsdp_tp_pp_eight_ranks_equal_reference(parity_ref, tmp_path):
    """dp 2 × pp 2 × tp 2: each dp replica gets micro 4, split into 4 pipeline microbatches."""
    assert_same(launch(tmp_path, "fsdp_tp_pp", 8, [*THREE_D, "batch.micro=4"]), parity_ref)
    record = read_json(tmp_path / "fsdp_tp_pp" / "record.json")
    assert (record["trial"]["dp"], record["trial"]["pp"], record["trial"]["tp"]) == (2, 2, 2)
    layout = record["metrics"]["layout"]
    assert layout["bubble_theory"] == (2 - 1) / (4 + 2 - 1)  # 1f1b, m = 4
    assert len(layout["bubble_measured_per_rank"]) == 8
    assert 0.0 <= layout["bubble_measured"] <= 1.0
    assert (layout["schedule"], layout["stages_per_rank"], layout["tp"]) == ("1f1b", 1, 2)
    assert layout["reshard_after_forward"] is True
    # Each send: one sample of the microbatch × its tp rank's half of the 64 positions × d_model 128.
    assert layout["p2p_numel"] == 1 * 32 * 128
    assert layout["fsdp_collective_time_s"] > 0  # dp = 2: FSDP's all-gathers and reduce-scatters replayed
    # Sequence all-gathers and reduce-scatters in every block, the loss's all-reduces, the norms' gradients.
    assert layout["tp_collectives_per_step"] > 0  # the most any rank issued
    assert layout["tp_collective_time_s"] > 0
    assert layout["collective_time_s"] >= layout["fsdp_collective_time_s"]
