"""`launcher plan`'s answer readable on its own (issue 31, item 9): an all-OOM plan in plan words."""

from __future__ import annotations

import re

import pandas as pd
import pytest

from launcher.cli import main

pytestmark = pytest.mark.usefixtures("one_mfu_presets")  # pins the one-MFU presets (conftest)


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


SEARCH_70B = [
    "plan",
    "--search",
    "model=llama3_70b",
    "precision=bf16",
    "batch.global_batch=1024",
    "cluster=example_gpu_site",
    "cluster.device_name=H100-SXM",
    "cluster.nics_per_node=8",
]


def test_an_efficiency_above_1_says_the_smallest_size_is_slower_per_gpu_and_why(capsys):
    """16 H100s fit llama3_70b only with full recompute (and cp); 256 need none, so eff reads about 1.2.
    Fails without notes.efficiency_lines in plan_search's footer: the 1.2 stands unexplained."""
    assert main([*SEARCH_70B, "--gpus", "16,256"]) == 0
    out = _said(capsys)
    assert "│ 256 │ fsdp_tp tp4 mb1×16 no-ckpt reshard sync-each │" in out and re.search(r"│ 1\.2\d │", out)
    assert (
        "eff above 1 at 256 GPUs: efficiency is against the smallest size, 16 GPUs (the best candidate that fits in "
        "its memory), which is slower per GPU: recompute is 18% of its step against 0% at 256 GPUs"
    ) in out


def test_efficiency_lines_per_variant_and_without_a_term_to_blame():
    """A plan (not a search) names no candidate; a variant's line says its variant; where no term's
    share differs, the per-GPU throughputs are the reason. Fails if efficiency_lines ignored variants or
    blamed a term whose share is the same at both sizes."""
    from launcher.perf.notes import efficiency_lines  # here: the other tests run on the code before it

    table = pd.DataFrame(
        {
            "variant": ["a", "a", "b", "b"],
            "world_size": [8, 16, 8, 16],
            "status": ["predicted"] * 4,
            "efficiency": [1.0, 1.1, 1.0, 0.9],
            "tokens_per_s_per_device": [1000.0, 1100.0, 1000.0, 900.0],
            "recompute_share": [0.0, 0.0, 0.0, 0.0],
            "bubble_share": [0.3, 0.3, 0.0, 0.0],
            "comm_share": [0.1, 0.1, 0.1, 0.2],
        }
    )
    assert efficiency_lines(table) == [
        "a: eff above 1 at 16 GPUs: efficiency is against the smallest size, 8 GPUs, which is slower per GPU: "
        "1,000 tokens/s per GPU against 1,100 at 16 GPUs"
    ]
    assert efficiency_lines(table[table["variant"] == "b"]) == []


def test_a_size_within_5_percent_of_usable_memory_is_marked_tight_with_one_footnote(capsys, tmp_path):
    """gpt_1_3b under ddp on an H100 needs 75.3 GiB of the 76.0 usable: `75.3 tight` in its row and one
    footnote line; the plan's CSV says it too. Fails without notes.tight in plan_table._finish (no
    column, no marker) or without tight_line in plan.main's footer."""
    out = tmp_path / "plan.csv"
    argv = ["plan", "model=gpt_1_3b", "cluster=example_gpu_site", "cluster.device_name=H100-SXM", "--gpus", "8,16"]
    assert main([*argv, "--output", str(out)]) == 0
    said = _said(capsys)
    assert "│ 75.3 tight │" in said
    assert said.count("tight: ") == 1
    assert (
        "tight: 8, 16 GPUs need within 5% of the 76.0 GiB usable (75.3, 75.3 GiB): the estimate's error could make "
        "them run out of memory; leave room (more recompute, a smaller batch.micro, more sharding) or measure it "
        "(--verify)"
    ) in said
    assert pd.read_csv(out)["memory_tight"].tolist() == [True, True]


def test_tight_is_the_last_5_percent_of_the_usable_memory_of_a_size_predicted_to_run():
    """72.2 of 76.0 GiB usable is tight (≥ 95%), 72.1 is not; an oom row is not tight. Fails if the bound
    moved or oom rows were marked."""
    from launcher.perf.memory import GIB
    from launcher.perf.memory_limit import Limit
    from launcher.perf.notes import tight  # here: the other tests run on the code before it

    limit = Limit(device_bytes=80 * GIB, usable_bytes=76 * GIB, source="test")
    table = pd.DataFrame({"status": ["completed", "completed", "oom"], "memory_gib": [72.2, 72.1, 80.0]})
    assert tight(table, limit).tolist() == [True, False, False]
    assert tight(table, None).tolist() == [False, False, False]


def test_the_search_explains_its_label_words_once_and_only_those_shown(capsys):
    """Fails without search_table.key_line in plan_search's footer (`keep`, `sync-each`, `mb1×512` are
    unexplained), or if the key explained words no label shows (`op`, `ep`). 256 GPUs' #3 interleaves
    5 stages a rank (`v5`, a divisor of its 10 layers a stage: issue 32 item 5), so `vN` is explained."""
    assert main([*SEARCH_70B, "--gpus", "16,256"]) == 0
    out = _said(capsys)
    assert out.count("key: ") == 1
    assert (
        "key: mbA×B: B micro-batches of A samples per step (accumulated, or a pipeline's micro-batches); tpN: "
        "tensor-parallel degree; ppN: pipeline stages; cpN: context-parallel degree (each sequence split over N GPUs); "
        "vN: interleaved virtual stages per GPU; no-ckpt: no activation checkpointing; full: full recompute (each "
        "block's forward again in backward); "
        "reshard: FSDP frees gathered parameters after forward and gathers them again in backward; keep: FSDP keeps "
        "them from forward to backward (more memory, one gather fewer); sync-each: gradients reduce-scattered at "
        "every micro-step, not only the last (less memory) memory:"
    ) in out


def test_a_tie_reads_as_a_tie_and_is_explained(capsys):
    """ddp's micro-batch splits of one batch predict the same step: each says it ties, not "loses by ties
    …", and the key says how ties rank. Fails without search_table._loses and key_line's tie sentence."""
    argv = ["plan", "--search", "model=gpt_1_3b", "cluster=example_gpu_site", "cluster.device_name=H100-SXM"]
    assert main([*argv, "--gpus", "8"]) == 0
    out = _said(capsys)
    # tokens/s moves with the packaged fit at each refit; the sentence is the point
    assert re.search(
        r"8 GPUs #2: ddp mb4×2 no-ckpt: [\d,]+ tokens/s \(\+0%\), 52\.7 GiB, comm 0%; ties the best within rounding",
        out,
    )
    assert "loses by ties" not in out
    assert (
        "key: mbA×B: B micro-batches of A samples per step (accumulated, or a pipeline's micro-batches); no-ckpt: no "
        "activation checkpointing; ties the best within rounding: no term of its step per token exceeds the best's; "
        "the larger micro-batch ranks first memory:"
    ) in out


def test_a_context_parallel_runner_up_loses_by_its_ring_not_a_tie(capsys):
    """At 256 H100s the fsdp_tp_cp runner-up is slower only by its context-parallel ring; why_loses did not
    weigh cp_comm_s and called it a tie. Fails without ("cp_comm_s", …) in search_table.TERMS."""
    assert main([*SEARCH_70B, "--gpus", "256"]) == 0
    out = _said(capsys)
    assert re.search(
        r"256 GPUs #2: fsdp_tp_cp tp4 cp2 mb2×16 no-ckpt reshard sync-each: [\d,]+ tokens/s \(-0%\), 74\.5 GiB, "
        r"comm 7%; loses by more exposed context-parallel ring time \(\+0\.\d% of the best's step\)",
        out,
    )


def _at(width: int, monkeypatch, argv: list[str]) -> list[str]:
    """What `launcher plan` prints on a terminal `width` columns wide, as lines."""
    import io

    from rich.console import Console

    from launcher.report import terminal

    console = Console(width=width, record=True, file=io.StringIO())
    monkeypatch.setattr(terminal, "stdout_console", lambda: console)
    main(argv)
    return console.export_text().splitlines()


def test_at_80_columns_a_search_keeps_tokens_per_s_and_memory(monkeypatch):
    """The candidate label (49 wide) gives way to tokens/s and memory, which the recommended row needs;
    an oom size shows the least memory any candidate needs. Fails without PLAN_PRIORITY passed to
    print_table by plan_search (only GPUs, candidate and status fit), or without the oom row's memory_gib
    in search_table.best_forecast (a dash)."""
    lines = _at(80, monkeypatch, [*SEARCH_70B, "--gpus", "8,256"])
    assert max(len(line) for line in lines) <= 80
    head = next(line for line in lines if line.startswith("┃"))
    assert [c.strip() for c in head.split("┃")[1:-1]] == ["GPUs", "status", "tokens/s", "mem GiB", "eff"]
    # tokens/s and its interval come from the packaged fit (they move with each refit); the columns are the point
    row = re.compile(r"│  256 │ predicted +│ [\d,]+ \[[\d,]+–[\d,]+\] │ 74\.5 tight │ 1\.00 │")
    assert any(row.fullmatch(line) for line in lines)
    assert "│    8 │ oom (predicted) │                         — │      138.1 │    — │" in lines
    assert "not shown at 80 columns: candidate, nodes, tok/s/dev, comm, step s, mfu," in lines
    assert any(line.startswith("Recommended: 256 GPUs with fsdp_tp: parallel=fsdp_tp parallel.tp=4") for line in lines)
