"""A minimal hand-written DDP loop: the baseline the launcher's harness is measured against.

Same model class, batch, optimizer and thread count as a launcher trial; none of the
launcher's machinery (no config, sampler, DataLoader, records, LR schedule, comm/compute
probes). Run one process per rank with RANK/WORLD_SIZE/MASTER_ADDR/MASTER_PORT set; rank 0
prints one JSON line: {"tokens_per_s": ..., "step_time_median_s": ...}.

    python -m benchmarks.hand_ddp MICRO STEPS WARMUP   # as harness_overhead.py runs it, once per rank
"""

import json
import statistics
import sys
import time

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel as DDP

from launcher.config.schema import ModelConfig
from launcher.train.models import build_model


def main(micro: int, steps: int, warmup: int) -> None:
    torch.set_num_threads(1)
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    cfg = ModelConfig()  # tiny_gpt defaults
    torch.manual_seed(0)
    model = DDP(build_model(cfg))
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3, betas=(0.9, 0.95), weight_decay=0.0)
    g = torch.Generator().manual_seed(rank)
    data = torch.randint(0, cfg.vocab_size, (steps, micro, cfg.seq_len + 1), generator=g)
    times = []
    for step in range(steps):
        start = time.perf_counter()
        x, y = data[step, :, :-1], data[step, :, 1:]
        loss = F.cross_entropy(model(x).reshape(-1, cfg.vocab_size), y.reshape(-1))
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        times.append(time.perf_counter() - start)
    everyone = [None] * world
    dist.all_gather_object(everyone, times[warmup:])
    measured = [max(ts) for ts in zip(*everyone, strict=True)]  # a step ends when its slowest rank does
    median = statistics.median(measured)
    if rank == 0:
        print(json.dumps({"tokens_per_s": micro * world * cfg.seq_len / median, "step_time_median_s": median}))
    dist.destroy_process_group()


if __name__ == "__main__":
    main(*map(int, sys.argv[1:4]))
