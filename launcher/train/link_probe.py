"""`python -m launcher.train.link_probe --trial trial.json --out probe.json`: a command trial's
link probe. Before the user's program, on the same ranks (same nodes, launched the same way), an
all-reduce of job.probe_bytes is timed as the built-in trainer times its gradient's
(allreduce_probe.time_allreduce), with two smaller sizes for the latency; rank 0 writes the
record's allreduce fields, the hosts, the device and how the ranks share their machines' cores
(measure.machine_metrics) into `--out` (command_record.py merges them). A one-rank trial times no
all-reduce; its probe records the device and host alone.
"""

from __future__ import annotations

import os
import socket
from typing import Any

import torch
import torch.distributed as dist

from launcher.cgroup import own_cpu_quota
from launcher.io import atomic_write_json
from launcher.train import dist as tdist
from launcher.train import node_tool
from launcher.train.allreduce_probe import Comm, comm_metrics, time_allreduce
from launcher.train.measure import machine_id, machine_metrics


def _rank_facts() -> dict[str, Any]:
    """This rank's host and the CPU it may use, as measure.gather_ranks records them."""
    quota = own_cpu_quota()
    return {
        "host": socket.gethostname(),
        "machine": machine_id(),
        "cpus": len(os.sched_getaffinity(0)),
        "threads": torch.get_num_threads(),
        "cpu_quota": quota.cpus,
        "cpu_group": quota.group,
    }


def main(argv: list[str] | None = None) -> int:
    begun = node_tool.start(
        "python -m launcher.train.link_probe", __doc__, "where rank 0 writes the probe's figures", argv
    )
    if begun is None:
        return 2
    cfg, renv, device, out = begun.cfg, begun.renv, begun.device, begun.out
    if renv.world_size == 1:  # one rank moves nothing over a link: the row still gets its device and host
        atomic_write_json(out, _facts([_rank_facts()], device))
        return 0
    tdist.init(renv, tdist.pick_backend(cfg.parallel.backend, device), device, cfg.cluster.pg_timeout_s)
    numel = max(1, cfg.job.probe_bytes // 4)
    group = dist.group.WORLD
    seconds = time_allreduce(numel, group, device)
    points = [(n, time_allreduce(n, group, device)) for n in (numel // 64, numel // 8) if n]
    everyone: list[dict] = [{}] * renv.world_size
    dist.all_gather_object(everyone, _rank_facts())
    if renv.rank == 0:
        comm = Comm(numel=numel, seconds=seconds, probe=points, ranks=renv.world_size)
        # The probe's bytes, not the program's gradient (perf/calibrate.py reads allreduce_of).
        atomic_write_json(out, {**comm_metrics(comm), "allreduce_of": "link_probe", **_facts(everyone, device)})
    dist.barrier()  # probe.json is on disk before any rank leaves (tdist.leave: no teardown after this)
    return 0


def _facts(everyone: list[dict], device: torch.device) -> dict[str, Any]:
    """The ranks' hosts and device (its name: the peak of the row's MFU), and how many ranks share a
    machine's cores, as the built-in trainer records it: plan --from's compute at another size on a
    bed whose nodes share one machine (perf/calibrate.py _contention)."""
    return {
        **machine_metrics(everyone, device),
        "hosts": [r["host"] for r in everyone],
        "device": device.type,
        "cuda_device_name": torch.cuda.get_device_name(device) if device.type == "cuda" else None,
    }


if __name__ == "__main__":
    tdist.leave(main())
