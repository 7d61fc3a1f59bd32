"""A Hugging Face Trainer script reporting to launcher through its callback: a 2-layer Llama built from a
config (no download), synthetic token data, started by torchrun (the Trainer runs DDP across the ranks;
gloo on CPU).

    torchrun --standalone --nproc-per-node=2 examples/hf_trainer/train.py --micro=4 --accum=1 --steps=20

Rank 0 prints the program's own whole-job rate over the steps after the warm-up, timed by a callback of its
own at the same optimizer-step boundary:

    whole-job tokens/s over steps 6-20: 12345.6
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time

import torch
from transformers import AutoModelForCausalLM, LlamaConfig, Trainer, TrainerCallback, TrainingArguments

from launcher.integrations.hf import MeterCallback, samples_per_step


def parse(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--micro", type=int, default=4, help="per_device_train_batch_size")
    p.add_argument("--accum", type=int, default=1, help="gradient_accumulation_steps")
    p.add_argument("--steps", type=int, default=20, help="max_steps, warm-up included")
    p.add_argument("--warmup-steps", type=int, default=5, help="leading steps left out of the printed rate")
    p.add_argument("--seq-len", type=int, default=64)
    return p.parse_args(argv)


class Tokens(torch.utils.data.Dataset):
    """Random token sequences, the same on every run; labels are the inputs (the model shifts them)."""

    def __init__(self, *, size: int, seq_len: int, vocab: int) -> None:
        self.ids = torch.randint(vocab, (size, seq_len), generator=torch.Generator().manual_seed(0))

    def __len__(self) -> int:
        return len(self.ids)

    def __getitem__(self, i: int) -> dict[str, torch.Tensor]:
        return {"input_ids": self.ids[i], "labels": self.ids[i]}


class OwnRate(TrainerCallback):
    """The program's own timing: the end of each optimizer step, and the whole job's rate after the warm-up."""

    def __init__(self, *, tokens_per_sample: int, warmup_steps: int) -> None:
        self.tokens_per_sample, self.warmup_steps, self.ends = tokens_per_sample, warmup_steps, []

    def on_step_end(self, args, state, control, **kwargs):
        self.ends.append(time.perf_counter())

    def on_train_end(self, args, state, control, **kwargs):
        w, n = self.warmup_steps, len(self.ends)
        if state.is_world_process_zero and 1 <= w < n:
            rate = samples_per_step(args) * self.tokens_per_sample * (n - w) / (self.ends[-1] - self.ends[w - 1])
            print(f"whole-job tokens/s over steps {w + 1}-{n}: {rate:.1f}", flush=True)


def main() -> None:
    args = parse()
    config = LlamaConfig(
        vocab_size=256,
        hidden_size=64,
        intermediate_size=172,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=args.seq_len,
    )
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_config(config)
    training = TrainingArguments(
        output_dir=tempfile.mkdtemp(prefix="hf_trainer_"),
        per_device_train_batch_size=args.micro,
        gradient_accumulation_steps=args.accum,
        max_steps=args.steps,
        learning_rate=1e-3,
        logging_steps=5,
        save_strategy="no",
        report_to="none",
        use_cpu=not torch.cuda.is_available(),
        ddp_backend=None if torch.cuda.is_available() else "gloo",
        dataloader_drop_last=True,
        ddp_find_unused_parameters=False,
        disable_tqdm=True,
    )
    data = Tokens(size=args.micro * args.accum * 64 * args.steps, seq_len=args.seq_len, vocab=config.vocab_size)
    trainer = Trainer(model=model, args=training, train_dataset=data)
    # the program's clock first, the meter's write after: both read a step's end at the same moment
    trainer.add_callback(OwnRate(tokens_per_sample=args.seq_len, warmup_steps=args.warmup_steps))
    trainer.add_callback(MeterCallback(tokens_per_sample=args.seq_len))  # launcher: one line
    trainer.train()
    if torch.distributed.is_initialized():
        # Leave together, then skip torch's teardown: destroying the gloo group can hang one rank after its
        # peer has gone (pytorch/pytorch#75097; seen here: rank 1 held the trial to its timeout after rank 0
        # exited, 1 two-rank run in ~15), and a rank exiting under another's open connection can abort it.
        # Every rank has passed the barrier and the meter's lines are flushed as written: nothing is left.
        torch.distributed.barrier()
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(0)


if __name__ == "__main__":
    main()
