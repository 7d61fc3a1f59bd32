"""A user's own training program for the command-payload tests: a tiny DDP model trained with gloo
on CPU, started by torchrun (or one process per rank with the torchrun variables set). Rank 0
writes one meter line per optimizer step, as launcher.meter's contract says (LAUNCHER_METER_FILE,
`{"step", "t", "tokens", "samples"}`; a minimal writer of its own, not launcher.meter), and
prints its own whole-job tokens/s over the steps after `--warmup`: the figure the row must match.

    python tests/support/ddp_meter_prog.py --micro 4 --seq 32 --steps 12 --warmup 3 [--fail oom|crash|silent]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--micro", type=int, default=4)
    p.add_argument("--seq", type=int, default=32)
    p.add_argument("--steps", type=int, default=12)
    p.add_argument("--warmup", type=int, default=3)
    p.add_argument("--width", type=int, default=64)
    p.add_argument("--fail", choices=["oom", "crash", "silent"], default=None)
    args = p.parse_args()
    torch.set_num_threads(1)
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    if args.fail == "oom" and rank == world - 1:
        raise RuntimeError("CUDA out of memory. Tried to allocate 2.00 GiB (stand-in for a real OOM)")
    if args.fail == "crash":
        raise ValueError(f"boom on rank {rank}")
    torch.manual_seed(0)
    model = DistributedDataParallel(
        torch.nn.Sequential(torch.nn.Linear(args.width, args.width), torch.nn.GELU(), torch.nn.Linear(args.width, 1))
    )
    opt = torch.optim.SGD(model.parameters(), lr=1e-3)
    meter = os.environ.get("LAUNCHER_METER_FILE") if rank == 0 and args.fail != "silent" else None
    out = open(meter, "a", buffering=1) if meter else None  # noqa: SIM115
    tokens = args.micro * args.seq * world  # the whole job's tokens per optimizer step
    times = [time.time()]
    for step in range(1, args.steps + 1):
        x = torch.randn(args.micro * args.seq, args.width)
        loss = model(x).pow(2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
        times.append(time.time())
        if out:
            out.write(json.dumps({"step": step, "t": times[-1], "tokens": tokens, "samples": None}) + "\n")
        if rank == 0:
            print(f"step {step}/{args.steps} loss {loss.item():.4f}", flush=True)
    # Steps warmup+1 … steps, each from the end of the one before: t_steps − t_warmup.
    if rank == 0:
        rate = tokens * (args.steps - args.warmup) / (times[-1] - times[args.warmup])
        print(f"program tokens_per_s={rate:.3f} world={world}", flush=True)
    dist.barrier()
    # Leave together, then skip gloo's teardown: it aborted rank 0 of a 2-node trial once after the
    # barrier ("terminate called without an active exception", as in pytorch/pytorch#75097).
    sys.stdout.flush()
    os._exit(0)


if __name__ == "__main__":
    main()
