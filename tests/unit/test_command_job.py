"""job=command (issue 22): the recipe group and its schema, per-trial interpolation of argv and env,
the payload's words, the local processes per launch, rank_exec, and the record written after the
ranks (ends with reasons). Pure or file-level: no ranks are spawned here."""

from __future__ import annotations

import json
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from launcher.config.compose import compose_config
from launcher.config.errors import ConfigError
from launcher.config.load import load_config
from launcher.config.plain import to_dict
from launcher.run.local_command import command_processes
from launcher.train.command_record import command_end, finish, rank_logs
from launcher.trials.command import resolve_text, trial_values
from launcher.trials.folder import write_trial
from launcher.trials.payload import PYTHON, payload_for
from launcher.trials.rank_exec import rank_environ, split_args
from launcher.trials.spec import sweep_trials

ARGV = "job.argv=[python,train.py,'--micro=${batch.micro}','--accum=${batch.accum}','--ws=${trial.world_size}']"


def command(*overrides: str):
    return compose_config(["job=command", ARGV, *overrides])


# --- schema and recipes --------------------------------------------------------------------------


def test_builtin_is_the_default_and_command_recipe_sets_its_defaults():
    assert compose_config([]).job.kind == "builtin"
    job = command().job
    assert (job.kind, job.launch, job.metrics, job.probe, job.probe_bytes) == (
        "command",
        "torchrun",
        "meter",
        True,
        64 * 2**20,
    )
    # `${…}` is kept as written (resolved per trial), and a stored document round-trips it exactly.
    assert job.argv == [
        "python",
        "train.py",
        "--micro=${batch.micro}",
        "--accum=${batch.accum}",
        "--ws=${trial.world_size}",
    ]
    assert load_config(to_dict(command())).job == job


def test_a_users_recipe_builds_on_command(tmp_path):
    (tmp_path / "job").mkdir()
    (tmp_path / "job" / "my_train.yaml").write_text(
        "defaults: [command]\n"
        'argv: [python, train.py, "--batch=${batch.micro}"]\n'
        "launch: srun\n"
        "metrics: regex\n"
        "pattern: 'tok/s (?P<tokens_per_s>[0-9.]+)'\n"
        "tokens_per_sample: 4096\n"
        "env: {NCCL_DEBUG: WARN, OUT: '${trial.dir}/out'}\n"
    )
    job = compose_config(["job=my_train"], recipes=tmp_path).job
    assert (job.kind, job.launch, job.metrics, job.tokens_per_sample) == ("command", "srun", "regex", 4096)
    assert job.env == {"NCCL_DEBUG": "WARN", "OUT": "${trial.dir}/out"}


# --- interpolation -------------------------------------------------------------------------------


def test_trial_values_follow_each_trial_and_the_aliases_take_the_derived_ones():
    cfg = command("sweep.world_sizes=[1,2,4]", "batch.global_batch=32", "batch.micro=4")
    values = [trial_values(t, Path("/r") / t.trial_id) for t in sweep_trials(cfg)]
    assert [(v["trial.world_size"], v["batch.accum"], v["trial.global_batch"]) for v in values] == [
        ("1", "8", "32"),
        ("2", "4", "32"),
        ("4", "2", "32"),
    ]
    assert values[1]["trial.dir"] == "/r/001-ws2" and values[1]["trial.id"] == "001-ws2"


def test_resolve_text_trial_values_config_values_escapes_and_unknown_keys():
    values = {"trial.world_size": "2"}
    config = {"model": {"seq_len": 64}, "train": {"compile": False}}
    assert resolve_text("--ws=${trial.world_size}x${model.seq_len}", "w", values, config) == "--ws=2x64"
    assert resolve_text("${train.compile}", "w", values, config) == "false"
    assert resolve_text(r"\${HOME} stays", "w", values, config) == "${HOME} stays"
    with pytest.raises(ConfigError, match=r"^job.argv\[3\]='--n=\$\{trial.nodez\}': unknown interpolation key"):
        resolve_text("--n=${trial.nodez}", "job.argv[3]", values, config)


def test_the_payload_words_per_trial_are_data_and_python_is_the_executors():
    cfg = command("sweep.world_sizes=[1,2]", "job.env={OUT: '${trial.dir}/o; $(rm -rf x)'}")
    payloads = [payload_for(cfg, trial=t, trial_dir=Path("/s") / t.trial_id) for t in sweep_trials(cfg)]
    assert [p.argv for p in payloads] == [
        (PYTHON, "train.py", "--micro=8", "--accum=1", "--ws=1"),
        (PYTHON, "train.py", "--micro=8", "--accum=1", "--ws=2"),
    ]
    assert payloads[1].env == (("OUT", "/s/001-ws2/o; $(rm -rf x)"), ("LAUNCHER_METER_FILE", "/s/001-ws2/meter.jsonl"))
    assert all(p.command and p.launch == "torchrun" for p in payloads)
    with pytest.raises(ValueError, match="per trial"):
        payload_for(cfg)


@pytest.mark.parametrize("launch", ["torchrun", "srun", "none"])
def test_local_processes_per_launch(launch, tmp_path):
    cfg = command(f"job.launch={launch}", "sweep.world_sizes=[2]")
    (trial,) = sweep_trials(cfg)
    payload = payload_for(cfg, trial=trial, trial_dir=tmp_path)
    procs = command_processes(payload, tmp_path, world_size=2, threads=1, user_env={"X": "1"})
    py, tail = sys.executable, ["train.py", "--micro=8", "--accum=1", "--ws=2"]
    if launch == "torchrun":
        (p,) = procs
        assert p.argv == [
            py,
            "-m",
            "torch.distributed.run",
            "--standalone",
            "--nnodes=1",
            "--nproc-per-node=2",
            "-m",
            "launcher.trials.rank_exec",
            str(tmp_path / "rank{rank}.log"),
            py,
            *tail,
        ]
        assert p.log == tmp_path / "agent.log"  # each rank writes its own rank<r>.log through rank_exec
    elif launch == "srun":
        assert [p.argv for p in procs] == [[py, *tail]] * 2
        assert [(p.env["RANK"], p.env["WORLD_SIZE"], p.env["LOCAL_RANK"]) for p in procs] == [
            ("0", "2", "0"),
            ("1", "2", "1"),
        ]
        assert procs[0].env["MASTER_ADDR"] == "127.0.0.1" and procs[0].env["MASTER_PORT"] == procs[1].env["MASTER_PORT"]
        assert [p.log.name for p in procs] == ["rank0.log", "rank1.log"]
    else:
        (p,) = procs
        assert p.argv == [py, *tail] and p.log.name == "rank0.log"
    assert all(p.env["X"] == "1" and p.env["LAUNCHER_METER_FILE"] == str(tmp_path / "meter.jsonl") for p in procs)


# --- rank_exec -----------------------------------------------------------------------------------


def test_rank_exec_fills_torchrun_variables_from_slurms_only_where_unset():
    slurm = {"SLURM_PROCID": "3", "SLURM_LOCALID": "1", "SLURM_NTASKS": "4", "SLURM_NTASKS_PER_NODE": "2(x2)"}
    assert rank_environ(slurm) | {} == slurm | {
        "RANK": "3",
        "LOCAL_RANK": "1",
        "WORLD_SIZE": "4",
        "LOCAL_WORLD_SIZE": "2",
    }
    torchrun = {"RANK": "0", "SLURM_PROCID": "1"}
    assert rank_environ(torchrun) == torchrun  # under torchrun on Slurm, SLURM_PROCID is the node's
    assert split_args(["-", "python", "-u", "x.py"]) == (None, ["python", "-u", "x.py"])
    assert split_args(["/d/rank{rank}.log", "a"]) == ("/d/rank{rank}.log", ["a"])


def test_rank_exec_sends_output_to_the_ranks_log_and_restores_usr1(tmp_path):
    code = "import signal; print('usr1', signal.getsignal(signal.SIGUSR1) == signal.SIG_DFL)"
    script = f"trap '' USR1; exec {shlex.quote(sys.executable)} -m launcher.trials.rank_exec \"$@\""
    argv = ["bash", "-c", script, "x", str(tmp_path / "rank{rank}.log"), sys.executable, "-c", code]
    subprocess.run(argv, env={"RANK": "5", "PATH": "/usr/bin:/bin", **_pythonpath()}, check=True)
    assert (tmp_path / "rank5.log").read_text() == "usr1 True\n"


def _pythonpath() -> dict[str, str]:
    return {"PYTHONPATH": str(Path(__file__).resolve().parents[2])}


# --- the record after the ranks: ends with reasons ------------------------------------------------


def _trial_dir(tmp_path: Path, *overrides: str) -> Path:
    cfg = command("sweep.world_sizes=[2]", "sweep.warmup_steps=2", *overrides)
    (trial,) = sweep_trials(cfg)
    write_trial(tmp_path, trial, cfg)
    return tmp_path


def _meter(tdir: Path, times: list[float], tokens: int = 1000) -> None:
    lines = [{"step": i + 1, "t": t, "tokens": tokens, "samples": None} for i, t in enumerate(times)]
    (tdir / "meter.jsonl").write_text("".join(json.dumps(x) + "\n" for x in lines))


def test_completed_record_carries_the_tables_fields(tmp_path):
    tdir = _trial_dir(tmp_path, "job.flops_per_token=1e6", "cluster.peak_flops_per_device=1e12")
    _meter(tdir, [10.0, 10.5, 11.0, 11.5, 12.0, 12.5])  # warm-up 2: steps 3..6 take 0.5 s each
    (tdir / "probe.json").write_text(
        json.dumps({"busbw_gbps": 3.5, "allreduce_time_s": 0.01, "hosts": ["a", "b"], "device": "cpu"})
    )
    record = finish(tdir, exit_code=0, started=1.0)
    m = record["metrics"]
    assert record["status"] == "completed" and record["reason"] is None and record["hosts"] == ["a", "b"]
    assert m["tokens_per_s"] == pytest.approx(2000.0) and m["tokens_per_s_per_device"] == pytest.approx(1000.0)
    assert m["step_time_median_s"] == pytest.approx(0.5) and m["step_time_p90_s"] == pytest.approx(0.5)
    assert m["mfu"] == pytest.approx(2000.0 * 1e6 / (1e12 * 2))
    assert (m["busbw_gbps"], m["allreduce_time_s"]) == (3.5, 0.01)
    assert json.loads((tdir / "record.json").read_text()) == record


def test_exit_zero_without_throughput_fails_naming_the_metrics_choices(tmp_path):
    record = finish(_trial_dir(tmp_path), exit_code=0)
    assert record["status"] == "failed"
    assert record["reason"].startswith("the command exited 0 but reported no throughput: ")
    assert "meter" in record["reason"] and "regex" in record["reason"]


def test_non_zero_exit_fails_with_the_telling_ranks_tail_and_oom_in_any_rank_is_oom(tmp_path):
    tdir = _trial_dir(tmp_path)
    (tdir / "rank0.log").write_text("step 1\nRuntimeError: [rank0] peer closed the connection\n")
    (tdir / "rank1.log").write_text(
        'Traceback (most recent call last):\n  File "t.py", line 3\nValueError: bad shape\n'
    )
    status, reason = command_end(1, rank_logs(tdir))
    assert (status, reason) == (
        "failed",
        "the command exited with code 1; rank 0 log ends: RuntimeError: [rank0] peer closed the connection",
    )
    (tdir / "rank1.log").write_text("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB\nmore\n")
    status, reason = command_end(1, rank_logs(tdir))
    assert status == "oom" and "rank 1 log ends: torch.OutOfMemoryError: CUDA out of memory." in reason
    assert finish(tdir, exit_code=1)["status"] == "oom"


def test_rank_logs_of_a_slurm_attempt(tmp_path):
    for name in ("rank0.attempt0.log", "rank1.attempt0.log", "rank0.attempt1.log", "rank0.log", "probe-rank0.log"):
        (tmp_path / name).write_text("")
    assert rank_logs(tmp_path, 0) == {0: tmp_path / "rank0.attempt0.log", 1: tmp_path / "rank1.attempt0.log"}
    assert rank_logs(tmp_path) == {0: tmp_path / "rank0.log"}


def test_megatron_is_read_from_the_last_rank_that_prints_it(tmp_path):
    """Megatron-LM prints its iteration lines on the last rank only (print_rank_last): a 2-rank trial's row
    reads them from rank1's log. Reading rank 0 (as every other reader does) fails it as 'no throughput'."""
    tdir = _trial_dir(
        tmp_path, "job.metrics=megatron", "job.tokens_per_sample=4096", "sweep.world_sizes=[2]", "sweep.warmup_steps=10"
    )
    (tdir / "rank0.log").write_text("> building GPT model ...\n")
    (tdir / "rank1.log").write_text((Path(__file__).parents[1] / "data" / "logs" / "megatron_d98e8a6.log").read_text())
    record = finish(tdir, exit_code=0)
    assert record["status"] == "completed", record["reason"]
    assert record["metrics"]["metrics_source"] == "megatron"
    assert record["metrics"]["tokens_per_s"] == pytest.approx(20 * 256 * 4096 / (10 * 1.9986 + 10 * 2.0041))


def test_torchrun_refusing_its_own_arguments_is_the_reason(tmp_path):
    """torchrun's argparse error (captured from torch 2.13's torch.distributed.run, an ambiguous `--nproc`) is in
    its own log (agent.log locally, node<n>.attempt<a>.log on Slurm), and no rank ever started: the row's reason
    quotes it. Before, the row read only 'the command exited with code 2'."""
    tdir = _trial_dir(tmp_path)
    captured = (Path(__file__).parents[1] / "data" / "logs" / "torchrun_ambiguous_option.log").read_text()
    (tdir / "agent.log").write_text(captured)
    record = finish(tdir, exit_code=2)
    assert (record["status"], record["reason"]) == (
        "failed",
        "the command exited with code 2; torchrun's log ends: run.py: error: ambiguous option: --nproc could match "
        "--nproc-per-node, --nproc_per_node",
    )
    (tdir / "node0.attempt1.log").write_text(captured)  # Slurm: the node's agent, attempt 1
    assert finish(tdir, exit_code=2, attempt=1)["reason"].endswith(
        "ambiguous option: --nproc could match --nproc-per-node, --nproc_per_node"
    )


def test_mfu_uses_the_gpu_the_probe_saw_where_the_recipe_names_none(tmp_path):
    """cluster.device_name defaults to "cpu": the peak is the table's row for torch's name of the GPU."""
    tdir = _trial_dir(tmp_path, "job.flops_per_token=1e9", "precision=bf16")
    _meter(tdir, [10.0, 10.5, 11.0, 11.5, 12.0, 12.5])
    probe = {"busbw_gbps": 300.0, "hosts": ["a", "b"], "device": "cuda", "cuda_device_name": "NVIDIA H100 80GB HBM3"}
    (tdir / "probe.json").write_text(json.dumps(probe))
    m = finish(tdir, exit_code=0, started=1.0)["metrics"]
    assert m["peak_flops_per_device"] == pytest.approx(989.4e12, rel=1e-3)  # H100 SXM dense bf16
    assert m["peak_source"].startswith("H100") and m["mfu"] == pytest.approx(2000.0 * 1e9 / (989.4e12 * 2), rel=1e-3)
