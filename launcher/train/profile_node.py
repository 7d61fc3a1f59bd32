"""`python -m launcher.train.profile_node --trial trial.json --out profile.json`: `launcher profile`'s
job on the nodes (torch and the standard library only). Every rank measures, as a training step
would load it, at once: matmuls over profile_plan's grid of shapes and dtypes, the causal attention
kernel, the memory bandwidth of a large copy, the host's cost per op, then all-reduce / all-gather /
reduce-scatter / all-to-all over a range of sizes among the first node's ranks (`intra`) and among
one rank per node (`inter`). Rank 0 prints `step i/N` after each (the launcher's progress bar) and
writes the profile (profile_plan's schema).
"""

from __future__ import annotations

import datetime
import math
import socket
import statistics
import time
from collections.abc import Callable
from typing import Any

import torch
import torch.distributed as dist
from torch.utils._python_dispatch import TorchDispatchMode  # torch's own op counter (private, stable since 1.13)

from launcher.io import atomic_write_json
from launcher.train import dist as tdist
from launcher.train import node_tool
from launcher.train import profile_plan as plan
from launcher.train.dist import sync

_TORCH_DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16}
MIN_ITERS, ENOUGH_S = 3, 0.5
"""A rank's own figure (a matmul, the copy) is its sustained rate: total time ÷ runs, over at least MIN_ITERS runs
lasting ENOUGH_S together, five of the kernel's 100 ms CPU-quota periods. The median of short runs read the bed's
256³ matmul at 109 GFLOP/s, a burst inside one period, where its 0.45-CPU quota sustains half that."""
COMM_ITERS, COMM_MAX_ITERS = 5, 100
"""A collective's figure is its sustained time: the mean over as many runs as last ENOUGH_S together (COMM_ITERS
to COMM_MAX_ITERS), a count the slowest member's first run sets for all (every member must call it as often: a
count each rank chose by its own clock left one rank waiting in a collective the others never called, a hang on
the bed). The median of five short runs read bursts inside one CPU-quota period: the bed's in-node 1 MiB
all-reduce between 0.3 and 9 ms, run to run."""
OVERLAP_ROUNDS, OVERLAP_S, OVERLAP_MAX_ROUNDS = 5, 2.0, 400
"""Rounds of (all-reduce alone, compute alone, both at once) the overlap share sums: as many as last OVERLAP_S of
all-reduce (OVERLAP_ROUNDS to OVERLAP_MAX_ROUNDS; the slowest member's first run sets the count). The share is a
difference of sums, needing longer ones than a collective's figure: at 0.5 s and 100 rounds four bed profiles at 2 ranks
a node read the in-node share −0.41, −0.95, −0.26, −0.76; at 2 s and 400, −0.63, −0.70, −0.65, −0.80 (+20 s each)."""


class Steps:
    """Rank 0's `step i/N` lines (the launcher reads the last one for its bar)."""

    def __init__(self, total: int, rank: int) -> None:
        self.total, self.done, self.rank = total, 0, rank

    def tick(self) -> None:
        self.done += 1
        if self.rank == 0:
            print(f"step {self.done}/{self.total}", flush=True)


def timed(
    fn: Callable[[], Any],
    device: torch.device,
    before: Callable[[], Any] | None = None,
    iters: int | None = None,
    clock: Callable[[], float] = time.perf_counter,
) -> float:
    """Seconds of one `fn()` after a warm-up call; `before` runs untimed ahead of each (a barrier). `iters`: the
    median of exactly that many runs (a collective); else the mean over runs lasting ENOUGH_S (MIN_ITERS at least).
    `clock`: the seconds it reads (a test's stand-in for time.perf_counter)."""
    fn()
    times: list[float] = []
    while len(times) < (iters or MIN_ITERS) or (not iters and sum(times) < ENOUGH_S):
        if before:
            before()
        sync(device)
        start = clock()
        fn()
        sync(device)
        times.append(clock() - start)
    return statistics.median(times) if iters else sum(times) / len(times)


def _median_over_ranks(seconds: float, device: torch.device) -> float:
    """Every rank measured at once, as they compute in a step: the ranks' median time."""
    if not dist.is_initialized():
        return seconds
    everyone = [0.0] * dist.get_world_size()
    dist.all_gather_object(everyone, seconds)
    return statistics.median(everyone)


def copies(nbytes: int, device: torch.device) -> int:
    """Sets of operands to cycle through so that together they hold COLD_BYTES: each run then reads operands
    the last one did not leave in cache, as a step's ops read activations the op before wrote elsewhere."""
    return max(1, -(-plan.COLD_BYTES[device.type] // max(1, nbytes)))


def _matmul(dtype: str, m: int, n: int, k: int, device: torch.device) -> Callable[[], Any]:
    if dtype == "fp8":  # torch._scaled_mm: per-tensor scales, b column-major (what float8 training calls)
        fp8 = [torch.randn(r, k, device=device).to(torch.float8_e4m3fn) for r in (m, n)]
        sets = [(fp8[0].clone(), fp8[1].clone().t()) for _ in range(copies(m * k + k * n, device))]
        one = torch.ones((), device=device)
        return _cycling(sets, lambda a, b: torch._scaled_mm(a, b, scale_a=one, scale_b=one, out_dtype=torch.bfloat16))
    like = dict(device=device, dtype=_TORCH_DTYPES[dtype])
    width = torch.tensor([], dtype=like["dtype"]).element_size()
    sets = [
        (torch.randn(m, k, **like), torch.randn(k, n, **like)) for _ in range(copies((m * k + k * n) * width, device))
    ]
    return _cycling(sets, lambda a, b: a @ b)


def _cycling(sets: list, fn: Callable[..., Any]) -> Callable[[], Any]:
    """`fn` on the next set of operands at each call, round the list."""
    turn = [0]

    def run() -> Any:
        turn[0] = (turn[0] + 1) % len(sets)
        return fn(*sets[turn[0]])

    return run


def fp8_missing(device: torch.device) -> str | None:
    """Why fp8 matmuls cannot be timed here, or None."""
    if device.type != "cuda":
        return "fp8: no fp8 matmul on CPU"
    if torch.cuda.get_device_capability(device) < (8, 9):
        return f"fp8: {torch.cuda.get_device_name(device)} has no fp8 tensor cores (compute capability < 8.9)"
    return None


def measure_matmuls(device: torch.device, steps: Steps, skipped: list[str]) -> dict[str, list[dict]]:
    out: dict[str, list[dict]] = {}
    for dtype in plan.dtypes(device.type):
        why = fp8_missing(device) if dtype == "fp8" else None
        for m, n, k in plan.matmul_shapes(device.type):
            if why is None:
                try:
                    t = _median_over_ranks(timed(_matmul(dtype, m, n, k, device), device), device)
                    out.setdefault(dtype, []).append({"m": m, "n": n, "k": k, "tflops": 2 * m * n * k / t / 1e12})
                except (RuntimeError, TypeError) as exc:  # a torch without this kernel: said, not guessed
                    why = f"{dtype}: {type(exc).__name__}: {str(exc).splitlines()[0][:200]}"
            steps.tick()
        if why:
            skipped.append(why)
    return out


def measure_attention(device: torch.device, steps: Steps) -> dict[str, list[dict]]:
    """The fused causal kernel, forward and backward, per (sequence, head dim): its counted FLOPs
    (12·T²·Q per head: scores and weighted values, backward twice forward) over its time."""
    out: dict[str, list[dict]] = {}
    for dtype in (d for d in plan.dtypes(device.type) if d != "fp8"):
        for seq, head_dim in plan.attention_shapes(device.type):
            rows = max(1, plan.ATTENTION_TOKENS[device.type] // seq)
            like = dict(device=device, dtype=_TORCH_DTYPES[dtype])
            nbytes = 4 * rows * seq * head_dim * torch.tensor([], dtype=like["dtype"]).element_size()
            sets = [
                [torch.randn(rows, 1, seq, head_dim, **like, requires_grad=True) for _ in range(3)]
                + [torch.ones(rows, 1, seq, head_dim, **like)]
                for _ in range(copies(nbytes, device))
            ]

            def step(q, k, v, grad) -> None:
                out_ = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)
                torch.autograd.grad(out_, (q, k, v), grad)

            t = _median_over_ranks(timed(_cycling(sets, step), device), device)
            out.setdefault(dtype, []).append(
                {"seq": seq, "head_dim": head_dim, "tflops": 12.0 * rows * seq * seq * head_dim / t / 1e12}
            )
            steps.tick()
    return out


def measure_op_cost(device: torch.device, steps: Steps) -> float:
    """µs per dispatched op of a training step on tensors of 8 elements a row: two pre-norm blocks'
    forward and backward, then an AdamW step (single-tensor, as torch picks on a CPU) and zero_grad, so
    the host's cost of each op (Python, dispatch, autograd, a kernel launch) with no arithmetic to speak of.
    Ops counted as the plan counts a step's (TorchDispatchMode: every aten op, views included)."""
    torch.manual_seed(0)
    width = 8
    layers = [torch.nn.LayerNorm(width), torch.nn.Linear(width, 4 * width), torch.nn.Linear(4 * width, width)] * 2
    model = torch.nn.ModuleList(layers).to(device)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    x = torch.randn(2, width, device=device)

    def step() -> None:
        h = x
        for i in range(0, len(layers), 3):
            h = h + layers[i + 2](torch.nn.functional.gelu(layers[i + 1](layers[i](h))))
        h.sum().backward()
        opt.step()
        opt.zero_grad(set_to_none=True)

    class Count(TorchDispatchMode):
        ops = 0

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            Count.ops += 1
            return func(*args, **(kwargs or {}))

    step()
    with Count():
        step()
    t = _median_over_ranks(timed(step, device), device)
    steps.tick()
    return t / Count.ops * 1e6


def measure_memory(device: torch.device, steps: Steps) -> float:
    """GB/s of a large copy: it reads and writes every byte once."""
    nbytes = plan.MEM_BYTES[device.type]
    src = torch.ones(nbytes // 4, device=device)
    dst = torch.empty_like(src)
    t = _median_over_ranks(timed(lambda: dst.copy_(src), device), device)
    steps.tick()
    return 2 * nbytes / t / 1e9


def _op(op: str, nbytes: int, n: int, group, device: torch.device) -> Callable[[], Any]:
    """One collective whose nccl-tests size is `nbytes` (rounded down to whole float32 parts per rank)."""
    parts = max(1, nbytes // 4 // n)
    whole = torch.ones(parts * n, device=device)
    part = torch.ones(parts, device=device)
    out = torch.empty_like(whole)
    return {
        "all_reduce": lambda: dist.all_reduce(whole, group=group),
        "all_gather": lambda: dist.all_gather_into_tensor(whole, part, group=group),
        "reduce_scatter": lambda: dist.reduce_scatter_tensor(part, whole, group=group),
        "all_to_all": lambda: dist.all_to_all_single(out, whole, group=group),
    }[op]


def groups(world: int) -> tuple[dict[str, list[int]], list[str]]:
    """Scope → its ranks: the first node's (intra), the first rank of each node (inter); and each rank's host."""
    hosts = [socket.gethostname()] * world
    if world > 1:
        dist.all_gather_object(hosts, socket.gethostname())
    first: dict[str, int] = {}
    for r, h in enumerate(hosts):
        first.setdefault(h, r)
    return {"intra": [r for r, h in enumerate(hosts) if h == hosts[0]], "inter": sorted(first.values())}, hosts


def _slowest(seconds: float, device: torch.device, group) -> float:
    """The group's largest figure (every member calls this)."""
    t = torch.tensor([seconds], device=device)
    dist.all_reduce(t, op=dist.ReduceOp.MAX, group=group)
    return float(t.item())


def sustained(fn: Callable[[], Any], device: torch.device, before: Callable[[], Any], group, clock=time.perf_counter):
    """Mean seconds of a collective `fn` over a count of runs every member of `group` agrees on (COMM_ITERS);
    `clock`: as `timed`'s."""
    first = timed(fn, device, before, iters=1, clock=clock)
    runs = min(COMM_MAX_ITERS, max(COMM_ITERS, math.ceil(ENOUGH_S / max(_slowest(first, device, group), 1e-9))))
    total = 0.0
    for _ in range(runs):
        before()
        sync(device)
        start = clock()
        fn()
        sync(device)
        total += clock() - start
    return total / runs


def measure_overlap(
    rank: int, device: torch.device, steps: Steps, ranks: dict[str, list[int]], made: dict[str, Any]
) -> dict[str, float]:
    """Per scope, the share of an all-reduce of OVERLAP_BYTES among the scope's ranks that compute hides while
    every rank computes (matmuls lasting about twice the all-reduce), the members' median. Every rank takes
    part in every round, as every rank of a data-parallel step computes while its buckets go."""
    dtype = plan.dtypes(device.type)[0]
    mm = _matmul(dtype, *plan.matmul_shapes(device.type)[2], device)
    per_mm = _slowest(timed(mm, device), device, None)
    out: dict[str, float] = {}
    for scope in plan.SCOPES:
        if made[scope] is not None:
            share = _overlap_share(made[scope], rank in ranks[scope], device, mm, per_mm)
            everyone: list[float | None] = [None] * dist.get_world_size()
            dist.all_gather_object(everyone, share)
            out[scope] = statistics.median(x for x in everyone if x is not None)
        steps.tick()
    return out


def _overlap_share(group, member: bool, device: torch.device, mm: Callable[[], Any], per_mm: float) -> float | None:
    """(t_comm + t_compute − t_both) ÷ t_comm in [−1, 1] on a member (None elsewhere), each time summed over
    the rounds (OVERLAP_ROUNDS) of: the all-reduce alone, the compute alone (every rank), both at once (every rank
    computes, the members all-reduce beside it)."""
    buf = torch.ones(plan.OVERLAP_BYTES[device.type] // 4, device=device)

    def comm() -> None:
        dist.all_reduce(buf, group=group)

    first = _slowest(timed(comm, device, iters=1) if member else 0.0, device, None)
    reps = max(1, math.ceil(2 * first / per_mm))
    rounds = min(OVERLAP_MAX_ROUNDS, max(OVERLAP_ROUNDS, math.ceil(OVERLAP_S / max(first, 1e-9))))

    def compute() -> None:
        for _ in range(reps):
            mm()

    def both() -> None:
        work = dist.all_reduce(buf, group=group, async_op=True)
        compute()
        work.wait()

    sums = [0.0, 0.0, 0.0]
    for _ in range(rounds):
        for i, fn in enumerate((comm, compute, both) if member else (lambda: None, compute, compute)):
            dist.barrier()
            sync(device)
            start = time.perf_counter()
            fn()
            sync(device)
            sums[i] += time.perf_counter() - start
    return overlap_share(*sums) if member else None


def overlap_share(t_comm: float, t_compute: float, t_both: float) -> float:
    """The share of `t_comm` that compute running at once hid: (t_comm + t_compute − t_both) ÷ t_comm, in [−1, 1]."""
    return min(1.0, max(-1.0, (t_comm + t_compute - t_both) / t_comm))


def measure_collectives(
    rank: int, world: int, device: torch.device, steps: Steps, skipped: list[str]
) -> tuple[dict[str, dict[str, list[dict]]], dict[str, dict], list[str], dict[str, float]]:
    sizes = plan.message_bytes(device.type)
    ranks, hosts = groups(world)
    made = {s: dist.new_group(r) if world > 1 and len(r) > 1 else None for s, r in ranks.items()}  # every rank
    out: dict[str, dict[str, list[dict]]] = {op: {} for op in plan.OPS}
    for scope in plan.SCOPES:
        n, group = len(ranks[scope]), made[scope]
        if group is None:
            where = "one rank on the first node" if scope == "intra" else "one node"
            skipped.append(f"{scope}: {where}, nothing crosses a link there")
        for op in plan.OPS:
            for nbytes in sizes:
                if group is not None and rank in ranks[scope]:
                    fn, wait = _op(op, nbytes, n, group, device), lambda g=group: dist.barrier(group=g)
                    t = _slowest(sustained(fn, device, wait, group), device, group)  # ends when its last rank does
                    algbw = (max(1, nbytes // 4 // n) * n * 4) / t / 1e9
                    point = {"bytes": nbytes, "busbw_gbs": algbw * plan.busbw_factor(op, n), "latency_us": t * 1e6}
                    out[op].setdefault(scope, []).append(point)
                if world > 1:
                    dist.barrier()  # the others wait: one measurement at a time on the links
                steps.tick()
    scopes = {s: {"ranks": len(r)} for s, r in ranks.items() if made[s] is not None}
    overlap = measure_overlap(rank, device, steps, ranks, made) if world > 1 else {}
    return {op: d for op, d in out.items() if d}, scopes, hosts, overlap


def main(argv: list[str] | None = None) -> int:
    begun = node_tool.start("python -m launcher.train.profile_node", __doc__, "where rank 0 writes the profile", argv)
    if begun is None:
        return 2
    cfg, renv, device, out = begun.cfg, begun.renv, begun.device, begun.out
    if renv.world_size > 1:
        tdist.init(renv, tdist.pick_backend(cfg.parallel.backend, device), device, cfg.cluster.pg_timeout_s)
    steps, skipped = Steps(plan.steps(device.type), renv.rank), []
    compute = {
        "matmul": measure_matmuls(device, steps, skipped),
        "attention": measure_attention(device, steps),
        "mem_bw_gbs": measure_memory(device, steps),
        "op_us": measure_op_cost(device, steps),
    }
    collectives, scopes, hosts, overlap = measure_collectives(renv.rank, renv.world_size, device, steps, skipped)
    if renv.rank == 0:
        compute["overlap"] = overlap
        atomic_write_json(out, _document(cfg, device, renv.world_size, hosts, compute, collectives, scopes, skipped))
    if renv.world_size > 1:
        dist.barrier()  # the profile is on disk before any rank leaves
    return 0


def _document(cfg, device, world, hosts, compute, collectives, scopes, skipped) -> dict[str, Any]:
    nodes = len(set(hosts))
    name = torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu"
    return {
        "schema": plan.SCHEMA,
        "version": plan.SCHEMA_VERSION,
        "device": {"name": name, "type": device.type, "threads_per_rank": cfg.cluster.threads_per_rank},
        "ranks": world,
        "nodes": nodes,
        "ranks_per_node": world // nodes,
        "hosts": hosts,
        **compute,
        "scopes": scopes,
        "collectives": collectives,
        "skipped": skipped,
        "torch": torch.__version__,
        "measured_at": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
    }


if __name__ == "__main__":
    tdist.leave(main())
