"""`launcher plan`'s answer readable on its own (issue 31, item 9): an all-OOM plan in plan words."""

from __future__ import annotations

from launcher.cli import main


def _said(capsys) -> str:
    return " ".join(capsys.readouterr().out.split())


def test_an_all_oom_plan_says_so_with_the_least_memory_and_what_to_try(capsys):
    """Fails without notes.no_fit in plan_table._finish: the plan says the sweep's "no trial completed,
    so there is nothing to recommend", as if something had run."""
    assert main(["plan", "model=llama3_70b", "cluster=example_gpu_site", "--gpus", "8..32"]) == 1
    out = _said(capsys)
    assert "no trial completed" not in out
    assert (
        "Recommended GPUs: none — every size is predicted out of memory: the least any size needs is 3897.5 GiB per "
        "rank (at 8 GPUs) > 76.0 GiB usable; try parallel=fsdp (parameters, gradients and optimizer state sharded "
        "over the GPUs), launcher plan --search (every layout, recompute and micro-batch) or more GPUs once the "
        "state is sharded"
    ) in out
    # Sharded already: more GPUs is the plain remedy, fsdp is not offered again.
    assert main(["plan", "model=llama3_70b", "parallel=fsdp", "cluster=example_gpu_site", "--gpus", "1,2"]) == 1
    out = _said(capsys)
    assert (
        "every size is predicted out of memory: the least any size needs is 2598.9 GiB per rank (at 2 GPUs) > 76.0 "
        "GiB usable; try launcher plan --search (every layout, recompute and micro-batch) or more GPUs (--gpus)"
    ) in out


def test_a_plan_of_oom_and_impossible_sizes_says_which(capsys):
    """Fails without no_fit's mixed case: "no trial completed" again."""
    argv = ["plan", "model=llama3_70b", "parallel=fsdp_tp", "parallel.tp=8", "cluster=example_gpu_site", "--gpus"]
    assert main([*argv, "4,8"]) == 1
    out = _said(capsys)
    assert (
        "Recommended GPUs: none — no size is predicted to run: 1 out of memory, the rest impossible (see reason): "
        in out
    )


def test_an_all_oom_search_says_what_to_try(capsys):
    """A search has tried every layout already: its one line offers more GPUs or more memory. Fails
    without the remedy appended in search.search's error."""
    argv = ["plan", "--search", "model=llama3_405b", "cluster=example_gpu_site", "--gpus", "8"]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1
    assert err.endswith(
        "; every size is predicted out of memory under every layout, recompute and micro-batch: try more GPUs "
        "(--gpus) or a device with more memory (cluster.device_name, cluster.device_memory_gb)\n"
    )
