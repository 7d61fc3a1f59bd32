"""A plain DDP training script with launcher's three-line meter change, as a user's own `train.py` would be:
a tiny GPT-style causal LM on synthetic tokens, gloo on CPU, NCCL on GPU, started by torchrun.

    torchrun --standalone --nproc-per-node=2 examples/ddp_meter/train.py --micro=4 --accum=1 --steps=20

The three lines for launcher are marked `# launcher`. Rank 0 also prints the program's own whole-job rate
over the steps after the warm-up, in the line launcher's tests compare with what it read from the meter:

    whole-job tokens/s over steps 6-20: 12345.6
"""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
import time
from collections.abc import Callable

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel

from launcher import meter  # launcher


def parse(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--micro", type=int, default=4, help="samples per rank per micro-step")
    p.add_argument("--accum", type=int, default=1, help="micro-steps per optimizer step")
    p.add_argument("--steps", type=int, default=20, help="optimizer steps, warm-up included")
    p.add_argument("--warmup-steps", type=int, default=5, help="leading steps left out of the printed rate")
    p.add_argument("--seq-len", type=int, default=64)
    p.add_argument("--vocab", type=int, default=256)
    p.add_argument("--width", type=int, default=128)
    p.add_argument("--layers", type=int, default=2)
    p.add_argument("--heads", type=int, default=4)
    p.add_argument("--ffn-mult", type=int, default=4, help="feed-forward width ÷ model width")
    return p.parse_args(argv)


class TinyGPT(nn.Module):
    """Token and position embeddings, pre-norm causal self-attention blocks, a final norm, a bias-free
    language-model head: launcher's `arch: gpt` shape, so its recipe can say `model_describes_program`."""

    def __init__(self, *, vocab: int, width: int, layers: int, seq_len: int, heads: int, ffn_mult: int) -> None:
        super().__init__()
        self.tokens = nn.Embedding(vocab, width)
        self.positions = nn.Embedding(seq_len, width)
        block = nn.TransformerEncoderLayer(
            width, nhead=heads, dim_feedforward=ffn_mult * width, dropout=0.0, batch_first=True, norm_first=True
        )
        self.blocks = nn.TransformerEncoder(block, layers, enable_nested_tensor=False)
        self.norm = nn.LayerNorm(width)
        self.head = nn.Linear(width, vocab, bias=False)
        self.register_buffer("mask", nn.Transformer.generate_square_subsequent_mask(seq_len), persistent=False)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        x = self.tokens(ids) + self.positions.weight[: ids.shape[1]]
        return self.head(self.norm(self.blocks(x, mask=self.mask, is_causal=True)))


def setup() -> tuple[int, int, torch.device]:
    """(rank, world size, device) after joining the process group torchrun describes."""
    if torch.cuda.is_available():
        device = torch.device("cuda", int(os.environ.get("LOCAL_RANK", "0")))
        torch.cuda.set_device(device)
        dist.init_process_group("nccl")
    else:
        device = torch.device("cpu")
        dist.init_process_group("gloo")
    return dist.get_rank(), dist.get_world_size(), device


def build(args: argparse.Namespace, device: torch.device) -> tuple[nn.Module, torch.optim.Optimizer]:
    torch.manual_seed(0)  # the same weights on every rank
    model = TinyGPT(
        vocab=args.vocab,
        width=args.width,
        layers=args.layers,
        seq_len=args.seq_len,
        heads=args.heads,
        ffn_mult=args.ffn_mult,
    ).to(device)
    ddp = DistributedDataParallel(model, device_ids=[device.index] if device.type == "cuda" else None)
    return ddp, torch.optim.AdamW(ddp.parameters(), lr=1e-3)


def make_step(
    args: argparse.Namespace, model: nn.Module, optimizer: torch.optim.Optimizer, rank: int, device: torch.device
) -> Callable[[], float]:
    """One optimizer step of `accum` micro-batches of synthetic tokens (this rank's own); returns the loss."""
    gen = torch.Generator().manual_seed(1000 + rank)

    def step() -> float:
        for i in range(args.accum):
            ids = torch.randint(args.vocab, (args.micro, args.seq_len + 1), generator=gen).to(device)
            # DDP all-reduces the gradients on the last micro-batch only
            sync = model.no_sync() if i < args.accum - 1 else contextlib.nullcontext()
            with sync:
                logits = model(ids[:, :-1])
                loss = nn.functional.cross_entropy(logits.flatten(0, 1), ids[:, 1:].flatten()) / args.accum
                loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        return loss.item() * args.accum

    return step


def main() -> None:
    args = parse()
    rank, world, device = setup()
    model, optimizer = build(args, device)
    step = make_step(args, model, optimizer, rank, device)
    tokens_per_step = args.micro * args.accum * args.seq_len * world  # launcher: the whole job's, every rank's
    ends = []
    for n in range(1, args.steps + 1):
        loss = step()
        # the program's clock reads the step's end at the meter's moment: the meter's write (and its flush,
        # slow on a loaded node) falls after both, so the two rates time the same window
        ends.append(time.perf_counter())
        meter.step(tokens=tokens_per_step)  # launcher
        if rank == 0 and (n == 1 or n % 5 == 0):
            print(f"step {n} loss {loss:.4f}", flush=True)
    w = args.warmup_steps
    if rank == 0 and 1 <= w < args.steps:
        rate = tokens_per_step * (args.steps - w) / (ends[-1] - ends[w - 1])
        print(f"whole-job tokens/s over steps {w + 1}-{args.steps}: {rate:.1f}", flush=True)
    leave()


def leave() -> None:
    """End every rank together, skipping the interpreter's teardown. gloo's worker thread frees a collective's
    work only after the caller has seen it finish; when that falls inside the interpreter's finalization, the
    free waits for the GIL, the thread is unwound and the rank aborts (SIGABRT, "terminate called without an
    active exception"; gdb: ProcessGroupGloo::runLoop → ~AsyncAllreduceWork → gil_scoped_acquire). It hit
    about 1 two-rank run in 60 here, destroy_process_group or not. Nothing is left to tear down: the barrier
    has passed on every rank, and the meter's lines and the printed rate are flushed as written."""
    dist.barrier()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


if __name__ == "__main__":
    main()
