"""arch=llama launched (the real payload in real processes, tests/support/layout_parity.py): under
every layout, without and with activation checkpointing, it equals one 1-process DDP run without
checkpointing within 1e-6 in losses and final parameters. In-process checks of the model:
tests/unit/test_llama.py."""

from __future__ import annotations

import pytest

from tests.support.layout_parity import assert_same, launch, reference
from tests.unit.test_llama import LLAMA

"""With layout_parity.BASE: 4 layers, 8 query heads, 4 key/value heads, ffn_hidden 344."""

# Each layout without checkpointing; checkpointing on the two layouts whose recompute runs through
# the layout's own machinery (FSDP's unit hooks: full; DTensor's sharded attention core: selective).
# That each mode's recompute is bitwise on the model itself is the in-process test above; ddp and
# pipeline run the same unsharded blocks, and fsdp_tp / fsdp_tp_pp combine the two covered here
# (the four trials they had cost 80 s of the suite). Global batch 8 everywhere, as the reference's.
LAYOUTS = {
    "ddp": (2, ["parallel=ddp", "batch.micro=4"]),
    "fsdp": (2, ["parallel=fsdp", "batch.micro=4"]),
    "pipeline": (2, ["parallel=pipeline"]),
    "tp": (2, ["parallel=tp"]),
    "fsdp_tp": (4, ["parallel=fsdp_tp", "parallel.tp=2", "batch.micro=4"]),
    "fsdp_tp_pp": (4, ["parallel=fsdp_tp_pp", "parallel.tp=2", "parallel.pp=2"]),  # dp 1: 4 ranks, not 8, on 2 cores
}


CASES = [
    (name, *LAYOUTS[name], ac) for name, ac in [*((n, "none") for n in LAYOUTS), ("fsdp", "full"), ("tp", "selective")]
]


@pytest.mark.torch_dist
@pytest.mark.parametrize("name,ranks,over,ac", CASES, ids=[f"{c[0]}-{c[3]}" for c in CASES])
def test_llama_layout_equals_the_reference(llama_parity_ref, tmp_path, name, ranks, over, ac):
    run = launch(tmp_path, name, ranks, LLAMA + over + [f"model.activation_checkpointing={ac}"])
    assert_same(run, llama_parity_ref, model=LLAMA)  # 1 process, DDP, micro 8, no checkpointing


# model.head_dim (issue 32): heads of 32 over a width of 128 (8 × 32 = 256 ≠ 128), split by tensor parallel as
# whole heads and, under context parallel, rotated by RoPE at their global positions over the wider head.
WIDE = [*LLAMA, "model.head_dim=32"]


@pytest.mark.torch_dist
def test_wide_heads_under_tp_and_cp_equal_their_one_process_reference(tmp_path):
    ref = reference(tmp_path / "ref", WIDE)
    assert ref[1]["blocks.0.attn.q.weight"].shape == (256, 128)
    for name, over in (("tp", ["parallel=tp"]), ("fsdp_cp", ["parallel=fsdp_cp", "parallel.cp=2", "batch.micro=8"])):
        assert_same(launch(tmp_path, name, 2, WIDE + over), ref, model=WIDE)
