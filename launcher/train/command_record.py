"""A `job=command` trial's record, written once its ranks have ended: the user's program reported
its throughput (launcher.harvest reads it: meter file, regex, framework logs) and the link probe
timed the trial's all-reduce (link_probe.py); both become the record fields the results table
reads, as the built-in trainer writes them (measure.py), so the same table, report, plots, repeats
and policies follow. No torch: it runs after the ranks, locally in the launcher, on Slurm as the
job script's last step (`python -m launcher.train.command_record DIR --exit-code N --attempt A`).
"""

from __future__ import annotations

import argparse
import platform
import re
import sys
import time
from pathlib import Path
from typing import Any

from launcher import __version__
from launcher.compute.flops import flops_per_token
from launcher.compute.peaks import choose_peak, math_dtype, resolve_precision
from launcher.config.schema import LauncherConfig
from launcher.harvest import NoThroughput, Reported, read_reported
from launcher.io import atomic_write_json, read_json
from launcher.train import metrics
from launcher.trials.ends import log_reason, meaningful_line, mentions_oom
from launcher.trials.folder import from_document, read_document
from launcher.trials.spec import Trial

RECORD_SCHEMA_VERSION = 1
PROBE_FILE = "probe.json"
"""Where the link probe's rank 0 leaves its figures in the trial folder."""
_RANK_LOG = re.compile(r"^rank(\d+)(?:\.attempt(\d+))?\.log$")
_FAILURE_WORDS = ("Traceback", "Error", "error:", "Killed", "Exception")


def rank_logs(tdir: Path, attempt: int | None = None) -> dict[int, Path]:
    """rank → its log in `tdir`: `rank<r>.log` (local), `rank<r>.attempt<a>.log` (Slurm, attempt `a`)."""
    found: dict[int, Path] = {}
    for path in tdir.glob("rank*.log"):
        m = _RANK_LOG.match(path.name)
        if m and (m.group(2) is None) == (attempt is None) and (attempt is None or int(m.group(2)) == attempt):
            found[int(m.group(1))] = path
    return dict(sorted(found.items()))


def _text(path: Path | None) -> str:
    try:
        return path.read_text(errors="replace") if path else ""
    except OSError:
        return ""


def printing_rank(metrics: str, logs: dict[int, Path]) -> int:
    """The rank whose output holds the program's training log: Megatron-LM prints it on the last rank
    (training_log's print_rank_last), so a multi-GPU trial's rank 0 holds none; the other readers rank 0."""
    return max(logs) if metrics == "megatron" and logs else 0


def agent_logs(tdir: Path, attempt: int | None = None) -> list[Path]:
    """torchrun's own output: `agent.log` (local), each node's agent's `node<n>.attempt<a>.log` (Slurm)."""
    if attempt is None:
        return [tdir / "agent.log"] if (tdir / "agent.log").exists() else []
    return sorted(tdir.glob(f"node*.attempt{attempt}.log"))


def command_end(exit_code: int, logs: dict[int, Path], agents: list[Path] | None = None) -> tuple[str, str]:
    """(status, reason) of a command that exited with `exit_code` ≠ 0: `oom` when any rank's log
    says out of memory (OOM_MARKERS), else `failed`; the reason quotes the telling rank's last line, or,
    where no rank's log tells (torchrun refused its own arguments before starting one), torchrun's."""
    texts = {r: _text(p) for r, p in logs.items()}
    oom = [r for r, t in texts.items() if mentions_oom(t)]
    told = oom or [r for r, t in texts.items() if any(w in t for w in _FAILURE_WORDS)] or list(texts)[:1]
    if not oom and not any(any(w in texts[r] for w in _FAILURE_WORDS) for r in told):
        for path in agents or []:
            if any(w in _text(path) for w in _FAILURE_WORDS) and (line := log_reason(path)):
                return "failed", f"the command exited with code {exit_code}; torchrun's log ends: {line}"
    said = ""
    if told:
        rank = told[0]
        lines = texts[rank].splitlines()
        at = max((i for i, ln in enumerate(lines) if mentions_oom(ln)), default=len(lines) - 1)
        tail = meaningful_line("\n".join(lines[: at + 1])) if oom else log_reason(logs[rank])
        said = f"; rank {rank} log ends: {tail}"
    if oom:
        return "oom", f"out of memory (infeasible at this size): the command exited with code {exit_code}{said}"
    return "failed", f"the command exited with code {exit_code}{said}"


def speed_metrics(
    reported: Reported, *, trial: Trial, cfg: LauncherConfig, device: str | None, detected: str | None = None
) -> dict[str, Any]:
    """The record's throughput fields from what the program reported; MFU with job.flops_per_token
    (or the model group's count, where it describes the program) and a known peak:
    cluster.peak_flops_per_device, else the table's row for the GPU the probe saw (`detected`, torch's
    name for it; it also wins over a cluster.device_name naming another device, flagged), else
    cluster.device_name's row. A GPU cluster's recipe rarely names its device (the default is
    "cpu"), so without the probe's name the MFU column was blank on every GPU cluster."""
    tokens_s = reported.tokens_per_s
    steps = list(reported.step_s)
    stats = (
        metrics.step_stats(steps)
        if steps
        else dict.fromkeys(("step_time_median_s", "step_time_p10_s", "step_time_p90_s"))
    )
    tps = tokens_per_sample(cfg)
    cuda = device == "cuda"
    precision = resolve_precision(str(cfg.precision), device or "cpu")  # what the recipe says the program runs in
    dtype = math_dtype(precision, tf32=cuda)
    peak = choose_peak(
        device_name=cfg.cluster.device_name if cuda else None,
        dtype=dtype,
        explicit=cfg.cluster.peak_flops_per_device,
        detected=detected if cuda else None,
    )
    fpt = cfg.job.flops_per_token or (flops_per_token(cfg.model) if cfg.job.model_describes_program else None)
    mfu = None
    if fpt:
        mfu = metrics.mfu(
            tokens_per_s=tokens_s, flops_per_token=fpt, peak_flops_per_device=peak.flops, devices=trial.world_size
        )
    return {
        **stats,
        "tokens_per_s": tokens_s,
        "tokens_per_s_per_device": tokens_s / trial.world_size,
        "samples_per_s": tokens_s / tps if tps else None,
        "tokens_per_sample": tps,
        "steps_measured": len(steps),
        "metrics_source": reported.source,
        "printed_tokens_per_s": reported.printed_tokens_per_s,
        "flops_per_token": fpt,
        "mfu": mfu,
        "precision": precision,
        "matmul_dtype": dtype,
        "peak_flops_per_device": peak.flops,
        "peak_source": peak.source,
        "peak_mismatch": peak.mismatch,
    }


def tokens_per_sample(cfg: LauncherConfig) -> int | None:
    """job.tokens_per_sample, or the model's seq_len where the model group describes the program."""
    tps = cfg.job.tokens_per_sample
    return tps or (cfg.model.seq_len if cfg.job.model_describes_program else None)


def finish(tdir: Path, *, exit_code: int, attempt: int | None = None, started: float | None = None) -> dict[str, Any]:
    """Write (and return) the record of the command trial in `tdir` whose command exited with `exit_code`."""
    doc = read_document(tdir / "trial.json").doc
    if doc is None:
        raise RuntimeError(f"{tdir / 'trial.json'} is unreadable: nothing to record")
    trial, cfg = from_document(doc)
    logs = rank_logs(tdir, attempt)
    probe = _probe(tdir)
    fields: dict[str, Any] = {"metrics": {}}
    if exit_code != 0:
        status, reason = command_end(exit_code, logs, agent_logs(tdir, attempt))
    else:
        try:
            reported = read_reported(
                metrics=str(cfg.job.metrics),
                trial_dir=tdir,
                rank0_text=_text(logs.get(printing_rank(str(cfg.job.metrics), logs))),
                warmup_steps=trial.warmup_steps,
                world_size=trial.world_size,
                tokens_per_sample=tokens_per_sample(cfg),
                pattern=cfg.job.pattern,
            )
        except NoThroughput as exc:
            status, reason = "failed", f"the command exited 0 but reported no throughput: {exc}"
        else:
            status, reason = "completed", None
            fields["metrics"] = speed_metrics(
                reported, trial=trial, cfg=cfg, device=probe.get("device"), detected=probe.get("cuda_device_name")
            )
    fields["metrics"].update({k: probe[k] for k in _PROBE_METRICS if k in probe})
    if probe.get("hosts"):
        fields.update(hosts=probe["hosts"], nodes=len(set(probe["hosts"])))
    now = time.time()
    record = {
        "schema_version": RECORD_SCHEMA_VERSION,
        "status": status,
        "reason": reason,
        "trial": doc["trial"],
        "config": doc["config"],
        "versions": {
            "launcher": __version__,
            "python": platform.python_version(),
            "executable": sys.executable,  # which interpreter ran: the image's, in a container
            "platform": platform.platform(),
        },
        "started_at": started,
        "finished_at": now,
        "exit_code": exit_code,
        "device": probe.get("device"),
        **({"wall_s": now - started} if started is not None else {}),
        **fields,
    }
    atomic_write_json(tdir / "record.json", record)
    return record


_PROBE_METRICS = (
    "allreduce_bytes",
    "allreduce_time_s",
    "algbw_gbps",
    "busbw_gbps",
    "allreduce_probe",
    "allreduce_of",
    "cpu_contention",
    "machines",
    "cpus_per_machine",
    "threads_per_rank",
    "cpu_quota_per_rank",
)


def _probe(tdir: Path) -> dict[str, Any]:
    """The link probe's figures ({} when it did not run or left none)."""
    try:
        found = read_json(tdir / PROBE_FILE)
    except (OSError, ValueError):
        return {}
    return found if isinstance(found, dict) else {}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m launcher.train.command_record", description=__doc__)
    parser.add_argument("trial_dir", type=Path)
    parser.add_argument("--exit-code", type=int, required=True, help="the command's exit status")
    parser.add_argument("--attempt", type=int, help="Slurm's restart count: rank logs rank<r>.attempt<A>.log")
    parser.add_argument("--started", type=float, help="time.time() when the trial's step began")
    args = parser.parse_args(argv)
    record = finish(args.trial_dir, exit_code=args.exit_code, attempt=args.attempt, started=args.started)
    print(f"trial {args.trial_dir}: {record['status']}" + (f": {record['reason']}" if record["reason"] else ""))
    return 0


if __name__ == "__main__":
    sys.exit(main())
