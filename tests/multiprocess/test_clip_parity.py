"""Gradient clipping by the global norm (optim.clip_grad_norm) equals the 1-process reference's
in every layout family: the norm each rank computes is the whole model's (DTensor pieces
completed over their mesh, pipeline stages added over pp), so the clipped steps, the losses and
the final parameters match the reference's within 1e-6 at 2 ranks. The norm is set below
what these steps' gradients reach, so clipping acts on every step (asserted from the record)."""

from __future__ import annotations

import pytest
import torch

from tests.support.layout_parity import STEPS, assert_same, run_trial

pytestmark = pytest.mark.torch_dist

MAX_NORM = 0.5
CLIP = [f"optim.clip_grad_norm={MAX_NORM}"]


def clipped_run(tmp, name, world_size, overrides):
    """(losses, parameters) of a launched trial, after checking that clipping acted on each step."""
    record = run_trial(tmp, name, world_size, CLIP + overrides)
    metrics = record["metrics"]
    assert len(metrics["grad_norms"]) == STEPS and metrics["clipped_steps"] == STEPS
    assert min(metrics["grad_norms"]) > MAX_NORM
    return (metrics["losses"], torch.load(tmp / name / "params.pt")), metrics["grad_norms"]


@pytest.fixture(scope="module")
def ref(tmp_path_factory):
    return clipped_run(tmp_path_factory.mktemp("clip_ref"), "reference", 1, ["parallel=ddp"])


@pytest.mark.parametrize(
    "name,overrides",
    [
        ("ddp", ["parallel=ddp", "batch.micro=4"]),
        ("fsdp", ["parallel=fsdp", "batch.micro=4"]),
        ("tp", ["parallel=tp"]),
        ("pipeline", ["parallel=pipeline", "parallel.schedule=1f1b"]),
    ],
)
def test_clipped_training_equals_the_one_process_reference(ref, tmp_path, name, overrides):
    run, norms = clipped_run(tmp_path, name, 2, overrides)
    (ref_run, ref_norms) = ref
    torch.testing.assert_close(torch.tensor(norms), torch.tensor(ref_norms), rtol=1e-6, atol=1e-6)
    assert_same(run, ref_run)


MOE = ["model=tiny_moe"]


@pytest.fixture(scope="module")
def moe_ref(tmp_path_factory):
    return clipped_run(tmp_path_factory.mktemp("clip_moe_ref"), "reference", 1, ["parallel=ddp", *MOE])


@pytest.mark.parametrize("layout", ["fsdp_ep", "ddp_ep"])
def test_clipped_expert_parallel_equals_the_one_process_reference(moe_ref, tmp_path, layout):
    """Each ep rank holds its own experts: the norm adds their squares over the ep group. With this rank's
    experts only (before), each rank scaled by its own factor: the recorded norm was rank 0's part and the
    replicated parameters drifted from the reference."""
    run, norms = clipped_run(tmp_path, layout, 2, [f"parallel={layout}", "parallel.ep=2", "batch.micro=4", *MOE])
    (ref_run, ref_norms) = moe_ref
    torch.testing.assert_close(torch.tensor(norms), torch.tensor(ref_norms), rtol=1e-6, atol=1e-6)
    assert_same(run, ref_run, model=MOE)
