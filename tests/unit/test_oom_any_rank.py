"""Out of memory on any rank ends the trial `oom`: the GPU stack's own wordings are markers, srun's
culprit task speaks for the trial (not the alphabetically first log), and rank 0's `failed` record
written after another rank's OOM still reads `oom`. Literal log lines, worded as their sources print them."""

from __future__ import annotations

import pytest

from launcher.results.table import trial_row
from launcher.slurm.explain import payload_detail
from launcher.trials.ends import failure_status, mentions_oom

# Each line as the named source prints it (captured style, torchrun's per-rank prefix on some).
CAPTURED = {
    # PyTorch c10/cuda/CUDACachingAllocator.cpp (OutOfMemoryError's message)
    "caching_allocator": "[rank1]: torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. "
    "GPU 1 has a total capacity of 79.10 GiB of which 1.06 GiB is free.",
    # PyTorch c10/cuda/CUDAException.h C10_CUDA_CHECK on cudaErrorMemoryAllocation
    "cuda_runtime": "RuntimeError: CUDA error: out of memory",
    # NCCL src/include/checks.h CUDACHECK (cudaErrorMemoryAllocation == 2), as ProcessGroupNCCL rethrows it
    "nccl": "torch.distributed.DistBackendError: NCCL error in: ProcessGroupNCCL.cpp:1970, unhandled cuda error "
    "(run with NCCL_DEBUG=INFO for details), NCCL version 2.21.5\nLast error:\nCuda failure 2 'out of memory'",
    # PyTorch aten/src/ATen/cuda/Exceptions.h TORCH_CUDABLAS_CHECK on cuBLAS's workspace allocation
    "cublas": "RuntimeError: CUDA error: CUBLAS_STATUS_ALLOC_FAILED when calling `cublasCreate(handle)`",
}


@pytest.mark.parametrize("source", sorted(CAPTURED))
def test_every_gpu_out_of_memory_wording_is_oom(source):
    assert mentions_oom(CAPTURED[source])
    assert failure_status("failed", None, CAPTURED[source]) == "oom"


def test_only_a_failure_turns_oom():
    assert failure_status("failed", "rank 1 exited with code 1; rank 1 log ends: RuntimeError: boom") == "failed"
    assert failure_status("timeout", CAPTURED["nccl"]) == "timeout"  # Slurm's word stands
    assert failure_status("completed", CAPTURED["cublas"]) == "completed"


TRIAL = {"trial_id": "003-ws2", "world_size": 2, "nodes": 1, "layout": "ddp", "dp": 2, "scaling": "weak"}


def test_rank0s_failed_record_after_rank1s_oom_reads_oom():
    record = {"status": "failed", "reason": "rank 0 raised RuntimeError: Connection closed by peer", "metrics": {}}
    outcome = {
        "executor": "local",
        "reason": f"rank 1 exited with code 1; rank 1 log ends: {CAPTURED['caching_allocator'][9:]}",
    }
    row = trial_row(TRIAL, record, outcome)
    assert row["status"] == "oom"
    assert row["reason"].startswith("rank 1 exited with code 1; rank 1 log ends: torch.OutOfMemoryError")


def test_slurm_culprit_is_the_task_srun_named(tmp_path):
    # rank 0 and rank 2 failed after rank 3 left the collective; all three logs say "Error".
    (tmp_path / "rank0.attempt0.log").write_text("RuntimeError: [gloo/transport/tcp/pair.cc:534] Connection closed\n")
    (tmp_path / "rank2.attempt0.log").write_text("RuntimeError: NCCL communicator was aborted on rank 2.\n")
    (tmp_path / "rank3.attempt0.log").write_text(f"step 3 loss 9.1\n{CAPTURED['nccl']}\n")
    (tmp_path / "exit_code.attempt0").write_text("1\n")
    batch = tmp_path / "slurm-7.out"
    batch.write_text(
        "srun: error: n2: task 3: Exited with exit code 1\n"
        "srun: error: n1: task 0: Exited with exit code 1\n"
        f"trial {tmp_path.resolve()}: srun exit 1 (attempt 0)\n"
    )
    detail = payload_detail(tmp_path, batch)
    assert detail == (
        "task 3 on n2: Exited with exit code 1 (srun); srun exit 1; rank3 log ends: Cuda failure 2 'out of memory'"
    )
    assert failure_status("failed", detail) == "oom"


def test_a_peer_that_exits_before_the_oom_rank_still_leaves_an_oom_reason(tmp_path):
    """On a busy host the rank a peer's OOM broke (its collective closed) can exit first: the local row's reason
    adds the OOM rank's line after the first rank's, so failure_status reads `oom` (before: `failed`, and
    test_oom_other_rank failed in a clean-clone run under load)."""
    from launcher.trials.ends import failure_status, failure_tails

    (tmp_path / "rank0.log").write_text("step 1\nRuntimeError: [../gloo] Connection closed by peer\n")
    (tmp_path / "rank1.log").write_text("step 1\ntorch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2 GiB\n")
    oom = "; rank 1 log ends: torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2 GiB"
    peer = "; rank 0 log ends: RuntimeError: [../gloo] Connection closed by peer"
    assert failure_tails(tmp_path, [0, 1]) == peer + oom
    assert failure_tails(tmp_path, [1, 0]) == oom  # the OOM rank first: its line alone, as before
    assert failure_status("failed", "rank 0 exited with code 1" + failure_tails(tmp_path, [0, 1])) == "oom"
