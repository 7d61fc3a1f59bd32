"""A Lightning script reporting to launcher through its callback: a tiny causal LM as a LightningModule,
synthetic tokens, the DDP strategy across the ranks torchrun starts (gloo on CPU, NCCL on GPU).

    torchrun --standalone --nproc-per-node=2 examples/lightning/train.py --micro=4 --accum=1 --steps=20

Rank 0 prints the program's own whole-job rate over the steps after the warm-up, timed by a callback of its
own at the same optimizer-step boundary:

    whole-job tokens/s over steps 6-20: 12345.6
"""

from __future__ import annotations

import argparse
import os
import sys
import time

import lightning.pytorch as pl
import torch
from torch import nn

from launcher.integrations.lightning import MeterCallback, batch_samples


def parse(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--micro", type=int, default=4, help="samples per rank per micro-step")
    p.add_argument("--accum", type=int, default=1, help="accumulate_grad_batches")
    p.add_argument("--steps", type=int, default=20, help="max_steps (optimizer steps), warm-up included")
    p.add_argument("--warmup-steps", type=int, default=5, help="leading steps left out of the printed rate")
    p.add_argument("--seq-len", type=int, default=64)
    p.add_argument("--vocab", type=int, default=256)
    p.add_argument("--width", type=int, default=64)
    return p.parse_args(argv)


class TinyLM(pl.LightningModule):
    """Embedding, two pre-norm causal self-attention blocks, a language-model head; next-token loss."""

    def __init__(self, *, vocab: int, width: int, seq_len: int) -> None:
        super().__init__()
        self.embed = nn.Embedding(vocab, width)
        block = nn.TransformerEncoderLayer(width, nhead=4, dim_feedforward=4 * width, batch_first=True, norm_first=True)
        self.blocks = nn.TransformerEncoder(block, 2, enable_nested_tensor=False)
        self.head = nn.Linear(width, vocab)
        self.register_buffer("mask", nn.Transformer.generate_square_subsequent_mask(seq_len), persistent=False)

    def training_step(self, batch: tuple[torch.Tensor], batch_idx: int) -> torch.Tensor:
        (ids,) = batch
        logits = self.head(self.blocks(self.embed(ids[:, :-1]), mask=self.mask, is_causal=True))
        return nn.functional.cross_entropy(logits.flatten(0, 1), ids[:, 1:].flatten())

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.AdamW(self.parameters(), lr=1e-3)


class OwnRate(pl.Callback):
    """The program's own timing: the end of each optimizer step (global_step moved), and the whole job's rate
    after the warm-up, counted from the batches as the program sees them."""

    def __init__(self, *, tokens_per_sample: int, warmup_steps: int) -> None:
        self.tokens_per_sample, self.warmup_steps = tokens_per_sample, warmup_steps
        self.ends: list[float] = []
        self.samples: list[int] = []  # the whole job's samples of each step
        self._pending = 0

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
        self._pending += batch_samples(batch)
        if trainer.global_step > len(self.ends):
            self.ends.append(time.perf_counter())
            self.samples.append(self._pending * trainer.world_size)
            self._pending = 0

    def on_train_end(self, trainer, pl_module):
        w, n = self.warmup_steps, len(self.ends)
        if trainer.is_global_zero and 1 <= w < n:
            tokens = sum(self.samples[w:]) * self.tokens_per_sample
            print(f"whole-job tokens/s over steps {w + 1}-{n}: {tokens / (self.ends[-1] - self.ends[w - 1]):.1f}")


def main() -> None:
    args = parse()
    world = int(os.environ.get("WORLD_SIZE", "1"))
    gen = torch.Generator().manual_seed(0)
    ids = torch.randint(args.vocab, (args.micro * args.accum * args.steps * world, args.seq_len + 1), generator=gen)
    data = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(ids), batch_size=args.micro, drop_last=True)
    torch.manual_seed(0)
    model = TinyLM(vocab=args.vocab, width=args.width, seq_len=args.seq_len)
    gpu = torch.cuda.is_available()
    trainer = pl.Trainer(
        accelerator="gpu" if gpu else "cpu",
        devices=int(os.environ.get("LOCAL_WORLD_SIZE", "1")),
        num_nodes=world // int(os.environ.get("LOCAL_WORLD_SIZE", "1")),
        strategy=pl.strategies.DDPStrategy(process_group_backend="nccl" if gpu else "gloo"),
        max_steps=args.steps,
        accumulate_grad_batches=args.accum,
        callbacks=[  # the program's clock first, the meter's write after: both read a step's end at one moment
            OwnRate(tokens_per_sample=args.seq_len, warmup_steps=args.warmup_steps),
            MeterCallback(tokens_per_sample=args.seq_len),  # launcher: one line
        ],
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        log_every_n_steps=5,
    )
    trainer.fit(model, data)
    if torch.distributed.is_initialized():
        # Leave together, then skip the interpreter's teardown: gloo's worker thread frees a collective's work
        # after the caller saw it finish, and a free that falls inside finalization aborts the rank (SIGABRT;
        # examples/ddp_meter/train.py's leave() has the trace). The barrier has passed everywhere, the meter's
        # lines are flushed as written: nothing is left.
        torch.distributed.barrier()
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(0)


if __name__ == "__main__":
    main()
