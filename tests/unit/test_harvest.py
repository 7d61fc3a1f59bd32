"""launcher.harvest.read_reported: a user's program's own throughput, from the meter file, a regex on rank 0's
output, or torchtitan's and Megatron-LM's log lines (literal lines in tests/data/logs/, their format copied
from the projects' source at the commits cited there). Exact fields, warm-up excluded."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from launcher.harvest import PRINTED, NoThroughput, read_reported

LOGS = Path(__file__).resolve().parents[1] / "data" / "logs"
CHOICES = "(job.metrics is one of meter, regex, torchtitan, megatron, hf, lightning)"


def _read(metrics: str, tmp_path: Path, text: str = "", **kw) -> object:
    args = dict(warmup_steps=2, world_size=1, tokens_per_sample=None, pattern=None) | kw
    return read_reported(metrics=metrics, trial_dir=tmp_path, rank0_text=text, **args)


def _meter(tmp_path: Path, records: list[tuple[float, int | None, int | None]], start: int = 1) -> None:
    lines = [
        json.dumps({"step": start + i, "t": t, "tokens": tok, "samples": s}) for i, (t, tok, s) in enumerate(records)
    ]
    with open(tmp_path / "meter.jsonl", "a") as f:
        f.write("\n".join(lines) + "\n")


def _no_throughput(reason: str, metrics: str = "meter") -> str:
    return f"no throughput from metrics={metrics}: {reason} {CHOICES}"


STEADY = [(10.0, 1000, None), (11.0, 1000, None), (11.5, 1000, None), (12.0, 1000, None), (12.6, 1000, None)]


def test_meter_steps_after_warm_up_are_timed_from_the_step_before(tmp_path):
    _meter(tmp_path, [*STEADY, (13.0, 1000, None)])
    got = _read("meter", tmp_path)
    # steps 3..6 measured: 11.5−11.0, 12.0−11.5, 12.6−12.0, 13.0−12.6
    assert got.source == "meter"
    assert got.step_s == pytest.approx((0.5, 0.5, 0.6, 0.4))
    assert got.tokens_per_s == pytest.approx(4000 / 2.0)
    assert got.printed_tokens_per_s is None


def test_meter_tokens_a_step_may_vary_and_count_as_given(tmp_path):
    _meter(tmp_path, [(0.0, 10, None), (1.0, 10, None), (2.0, 300, None), (5.0, 900, None)])
    got = _read("meter", tmp_path, warmup_steps=1)
    assert got.step_s == pytest.approx((1.0, 1.0, 3.0))
    assert got.tokens_per_s == pytest.approx((10 + 300 + 900) / 5.0)


def test_step_1_has_no_start_time_so_it_is_never_measured(tmp_path):
    _meter(tmp_path, STEADY[:3])
    assert _read("meter", tmp_path, warmup_steps=0).step_s == pytest.approx((1.0, 0.5))


def test_meter_samples_count_as_tokens_per_sample_each(tmp_path):
    _meter(tmp_path, [(0.0, None, 4), (1.0, None, 4), (1.5, None, 4), (2.0, None, 4)])
    got = _read("hf", tmp_path, tokens_per_sample=256)
    assert got.source == "hf"
    assert got.tokens_per_s == pytest.approx(2 * 4 * 256 / 1.0)


def test_meter_samples_without_tokens_per_sample_is_no_throughput(tmp_path):
    _meter(tmp_path, [(0.0, None, 4), (1.0, None, 4)])
    with pytest.raises(NoThroughput) as e:
        _read("lightning", tmp_path)
    assert str(e.value) == _no_throughput(
        "meter.step(samples=n) needs job.tokens_per_sample to count tokens; set it", "lightning"
    )


def test_a_restarted_program_is_measured_on_its_last_run(tmp_path):
    _meter(tmp_path, [(0.0, 5, None), (100.0, 5, None), (200.0, 5, None)])
    _meter(tmp_path, [(1000.0, 10, None), (1001.0, 10, None), (1002.0, 10, None), (1004.0, 10, None)])
    got = _read("meter", tmp_path)
    assert got.step_s == pytest.approx((1.0, 2.0)) and got.tokens_per_s == pytest.approx(20 / 3.0)


def test_a_torn_last_line_of_a_killed_job_is_dropped(tmp_path):
    _meter(tmp_path, STEADY)
    with open(tmp_path / "meter.jsonl", "a") as f:
        f.write('{"step": 6, "t": 13.')
    assert _read("meter", tmp_path).step_s == pytest.approx((0.5, 0.5, 0.6))


@pytest.mark.parametrize(
    ("records", "warmup", "reason"),
    [
        (None, 2, "{dir}/meter.jsonl was not written; call launcher.meter.step(tokens=n) each optimizer step"),
        ([(0.0, 1, None)], 0, "meter.jsonl holds fewer than 2 steps (step 1 has no start time); run more steps"),
        (STEADY, 5, "5 steps reported, none measured after the 5 warm-up steps; run more steps"),
        ([(0.0, 1, None), (1.0, None, None)], 0, "step 2 gave neither tokens nor samples to meter.step"),
    ],
)
def test_meter_with_no_usable_steps_says_why_on_one_line(tmp_path, records, warmup, reason):
    if records:
        _meter(tmp_path, records)
    with pytest.raises(NoThroughput) as e:
        _read("meter", tmp_path, warmup_steps=warmup)
    assert str(e.value) == _no_throughput(reason.format(dir=tmp_path))


def test_the_examples_printed_figure_is_read_beside_the_meter(tmp_path):
    _meter(tmp_path, STEADY)
    text = "step 4 loss 3.2\nwhole-job tokens/s over steps 3-5: 1980.4\n"
    assert PRINTED.search(text)["tokens_per_s"] == "1980.4"
    assert _read("meter", tmp_path, text).printed_tokens_per_s == 1980.4


LINES = "".join(
    f"[rank0]: step {i} loss 2.5 throughput {r:,} tok/s step_time {s}s\n"
    for i, r, s in [(1, 100, 9.0), (2, 1000, 1.0), (3, 1200, 0.8), (4, 800, 1.2)]
)


@pytest.mark.parametrize(
    ("group", "kw", "expected"),
    [
        ("tokens_per_s", {}, 2 / (1 / 1200 + 1 / 800)),
        ("tokens_per_s_per_gpu", {"world_size": 4}, 4 * 2 / (1 / 1200 + 1 / 800)),
        ("samples_per_s", {"tokens_per_sample": 64}, 64 * 2 / (1 / 1200 + 1 / 800)),
    ],
)
def test_regex_rates_are_the_whole_jobs_after_warm_up(tmp_path, group, kw, expected):
    pattern = rf"throughput (?P<{group}>[\d,.]+) tok/s"
    got = _read("regex", tmp_path, LINES, pattern=pattern, **kw)
    assert got.source == "regex" and got.step_s == ()
    assert got.tokens_per_s == pytest.approx(expected)


def test_regex_step_s_alone_needs_the_tokens_a_step(tmp_path):
    pattern = r"step_time (?P<step_s>[\d.]+)s"
    got = _read("regex", tmp_path, LINES, pattern=pattern, tokens_per_sample=100, samples_per_step=8)
    assert got.step_s == pytest.approx((0.8, 1.2))
    assert got.tokens_per_s == pytest.approx(2 * 800 / 2.0)
    with pytest.raises(NoThroughput) as e:
        _read("regex", tmp_path, LINES, pattern=pattern, tokens_per_sample=100)
    assert str(e.value) == _no_throughput(
        "a step_s figure alone needs the tokens a step (tokens_per_sample=100 × samples_per_step=None); "
        "set both, or match a tokens_per_s group",
        "regex",
    )


def test_regex_a_step_group_counts_the_steps_a_line_covers_and_step_s_times_them(tmp_path):
    text = "it 5 tps 900 t 1.0\nit 10 tps 1000 t 1.0\nit 20 tps 500 t 2.0\n"
    got = _read(
        "regex", tmp_path, text, pattern=r"it (?P<step>\d+) tps (?P<tokens_per_s>\d+) t (?P<step_s>\S+)", warmup_steps=5
    )
    # (5,10]: 5 steps of 1 s at 1000 tokens/s; (10,20]: 10 steps of 2 s at 500 tokens/s
    assert got.step_s == pytest.approx((1.0,) * 5 + (2.0,) * 10)
    assert got.tokens_per_s == pytest.approx((5 * 1000 + 20 * 500) / 25)


def test_regex_that_matches_nothing_is_no_throughput(tmp_path):
    with pytest.raises(NoThroughput) as e:
        _read("regex", tmp_path, LINES, pattern=r"tps=(?P<tokens_per_s>\d+)")
    assert str(e.value) == _no_throughput(
        "job.pattern 'tps=(?P<tokens_per_s>\\\\d+)' matched nothing in rank 0's output", "regex"
    )


@pytest.mark.parametrize(
    ("pattern", "message"),
    [
        (
            r"tps=(\d+)",
            "job.pattern 'tps=(\\\\d+)' names none of the groups tokens_per_s, tokens_per_s_per_gpu, samples_per_s, "
            "step_s; name one, e.g. (?P<tokens_per_s>[0-9.]+)",
        ),
        (r"tps=(?P<tokens_per_s>", "job.pattern 'tps=(?P<tokens_per_s>' is not a regular expression"),
        (None, "metrics=regex needs job.pattern with a named group"),
    ],
)
def test_a_regex_with_no_usable_group_is_bad_input(tmp_path, pattern, message):
    with pytest.raises(ValueError) as e:
        _read("regex", tmp_path, LINES, pattern=pattern)
    assert str(e.value).startswith(message) and "\n" not in str(e.value)


def test_an_unknown_metrics_is_bad_input(tmp_path):
    with pytest.raises(ValueError) as e:
        _read("wandb", tmp_path)
    assert (
        str(e.value) == "job.metrics='wandb' is not one of meter, regex, torchtitan, megatron, hf, lightning; pick one"
    )


TORCHTITAN = (LOGS / "torchtitan_b5bcd76.log").read_text()
MEGATRON = (LOGS / "megatron_d98e8a6.log").read_text()


def test_torchtitan_tps_is_per_device_over_the_steps_since_the_line_before(tmp_path):
    got = _read("torchtitan", tmp_path, TORCHTITAN, warmup_steps=10, world_size=8)
    # (10,20] at 10,496 and (20,30] at 10,368 tokens/s a device, 10 steps each; the validate line is not training
    assert got.source == "torchtitan" and got.step_s == ()
    assert got.tokens_per_s == pytest.approx(8 * 20 / (10 / 10496 + 10 / 10368))


def test_torchtitan_warm_up_drops_each_interval_that_starts_inside_it(tmp_path):
    got = _read("torchtitan", tmp_path, TORCHTITAN, warmup_steps=1, world_size=2)
    # (1,10] is 9 steps at 10,240: step 1's line (startup) is the only one dropped
    assert got.tokens_per_s == pytest.approx(2 * 29 / (9 / 10240 + 10 / 10496 + 10 / 10368))


def test_torchtitan_without_colour_reads_the_same(tmp_path):
    line = "[titan] 2026-08-22 10:00:12,110 - root - INFO - step: 12  loss:  9.81234  grad_norm:  8.0311  "
    text = line + "memory: 41.07GiB(51.83%)  tps: 1,234  tflops: 55.32  mfu: 5.59%\n"
    got = _read("torchtitan", tmp_path, text, warmup_steps=0, world_size=4)
    assert got.tokens_per_s == pytest.approx(4 * 1234)


def test_megatron_iterations_carry_global_batch_samples_of_tokens_per_sample_each(tmp_path):
    got = _read("megatron", tmp_path, MEGATRON, warmup_steps=10, world_size=64, tokens_per_sample=4096)
    assert got.source == "megatron"
    assert got.step_s == pytest.approx((1.9986,) * 10 + (2.0041,) * 10)
    assert got.tokens_per_s == pytest.approx(20 * 256 * 4096 / (10 * 1.9986 + 10 * 2.0041))


def test_megatron_needs_tokens_per_sample(tmp_path):
    with pytest.raises(NoThroughput) as e:
        _read("megatron", tmp_path, MEGATRON)
    assert str(e.value) == _no_throughput(
        "Megatron logs samples (global batch size); set job.tokens_per_sample (its seq length)", "megatron"
    )


@pytest.mark.parametrize(
    ("metrics", "reason"),
    [
        ("torchtitan", "no torchtitan training log line in rank 0's output; is its logging on, at INFO level?"),
        (
            "megatron",
            "no megatron iteration line in the output read (Megatron prints it on the last rank); is it there?",
        ),
    ],
)
def test_a_log_with_no_training_line_says_so(tmp_path, metrics, reason):
    with pytest.raises(NoThroughput) as e:
        _read(metrics, tmp_path, "W1125 rank 0 starting\n", tokens_per_sample=8)
    assert str(e.value) == _no_throughput(reason, metrics)


# --- issue 31 item 2: what a regex's matches mean (docs/own-command.md, "What a metrics=regex pattern's matches mean")

OWN_COMMAND = Path(__file__).resolve().parents[2] / "docs" / "own-command.md"
DOC_SECTION = OWN_COMMAND.read_text().split("### What a `metrics=regex` pattern's matches mean", 1)[1]
EVERY_5 = DOC_SECTION.split("```text\n", 1)[1].split("```", 1)[0]
"""The docs' log: a line every 5 steps (steps 5-20), then a summary line."""
WITH_STEP = r"step (?P<step>\d+) loss \S+ (?P<tokens_per_s>[0-9.]+) tok/s"
NO_STEP = r"(?P<tokens_per_s>[0-9.]+) tok/s$"
SUMMARY = r"trained \d+ steps: (?P<tokens_per_s>[0-9.]+) tok/s overall"


def test_the_docs_show_each_pattern_and_log_this_test_reads():
    """The patterns and the log below are the docs' own, so what the docs say each reads is what this file checks."""
    assert EVERY_5.splitlines()[0] == "step 5 loss 2.31 1800.0 tok/s" and len(EVERY_5.splitlines()) == 5
    for pattern in (WITH_STEP, NO_STEP, SUMMARY):
        assert f"`'{pattern}'`" in " ".join(DOC_SECTION.split()), pattern


def test_a_step_group_counts_the_warm_up_in_steps_not_lines(tmp_path):
    # warm-up 5: the line at step 5 (steps 1-5) is left out, the three after it (steps 6-20, 15 steps) read
    got = _read("regex", tmp_path, EVERY_5, pattern=WITH_STEP, warmup_steps=5)
    assert got.tokens_per_s == 2000.0


def test_without_a_step_group_lines_that_all_fall_in_the_warm_up_name_the_step_group(tmp_path):
    """Fails on the code before: the reason read '4 steps reported, none measured after the 5 warm-up steps; run
    more steps', counting lines as steps without saying so."""
    with pytest.raises(NoThroughput) as e:
        _read("regex", tmp_path, EVERY_5, pattern=NO_STEP, warmup_steps=5)
    assert str(e.value) == _no_throughput(
        "job.pattern matched 4 lines, each counted as one step as it has no step group, none after the 5 warm-up "
        "steps; capture the step number, (?P<step>\\d+), or run more steps",
        "regex",
    )


@pytest.mark.parametrize(
    ("group", "kw", "expected"),
    [
        ("tokens_per_s", {}, 1975.5),
        ("tokens_per_s_per_gpu", {"world_size": 4}, 4 * 1975.5),
        ("samples_per_s", {"tokens_per_sample": 64}, 64 * 1975.5),
    ],
)
def test_a_pattern_that_matches_once_is_the_programs_summary_figure(tmp_path, group, kw, expected):
    """Fails on the code before: one match counted as step 1, inside the warm-up, and the trial failed with
    'run more steps'."""
    pattern = SUMMARY.replace("tokens_per_s", group)
    got = _read("regex", tmp_path, EVERY_5, pattern=pattern, warmup_steps=5, **kw)
    assert got.source == "regex" and got.tokens_per_s == expected and got.step_s == ()


def test_a_summary_after_a_restart_is_the_last_runs(tmp_path):
    # the step group falls at the restart: only the last run's one line counts, and it is that run's summary
    text = "step 10 tps 900\nstep 20 tps 950\nstep 20 tps 1000\n"
    got = _read("regex", tmp_path, text, pattern=r"step (?P<step>\d+) tps (?P<tokens_per_s>\d+)", warmup_steps=5)
    assert got.tokens_per_s == 1000.0


@pytest.mark.parametrize(
    ("pattern", "reason"),
    [
        (
            r"step (?P<step>\S+) \S+ (?P<tokens_per_s>[0-9.]+)",
            "the step group matched '5/40', not a step number; capture the digits alone, (?P<step>\\d+)",
        ),
        (
            r"step \S+ \S+ (?P<tokens_per_s>\S+)",
            "the tokens_per_s group matched '1.2k', not a number; capture the digits alone, e.g. [0-9.,]+",
        ),
    ],
)
def test_a_capture_that_is_not_a_number_is_the_trials_reason(tmp_path, pattern, reason):
    """Fails on the code before: int()/float() raised ValueError, which the record step (command_record.finish) does
    not catch: no record said why."""
    text = "step 5/40 loss 1.2k\nstep 10/40 loss 1.3k\n"
    with pytest.raises(NoThroughput) as e:
        _read("regex", tmp_path, text, pattern=pattern, warmup_steps=0)
    assert str(e.value) == _no_throughput(reason, "regex")
