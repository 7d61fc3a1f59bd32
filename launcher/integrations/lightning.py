"""`MeterCallback` for Lightning: `Trainer(callbacks=[MeterCallback(tokens_per_sample=L)])` and
`job.metrics: lightning`. Needs the `lightning` extra."""

from __future__ import annotations

from typing import Any

import lightning.pytorch as pl

from launcher import meter


def batch_samples(batch: Any) -> int:
    """Samples in one rank's micro-batch: the leading dimension of its first tensor (a tensor, or the first
    of a tuple, list or dict of them, as DataLoader collates)."""
    first = batch
    while isinstance(first, (list, tuple, dict)):
        first = next(iter(first.values())) if isinstance(first, dict) else first[0]
    return int(first.shape[0])


class MeterCallback(pl.Callback):
    """Calls `meter.step` once per optimizer step: at the end of the micro-batch after which the trainer's
    global_step moved (so gradient accumulation, manual optimization and a short last accumulation all count
    right), with the whole job's tokens of that step (this rank's samples since the last step × world size,
    every rank batching alike, × `tokens_per_sample` when given, else samples for job.tokens_per_sample)."""

    def __init__(self, *, tokens_per_sample: int | None = None) -> None:
        self.tokens_per_sample = tokens_per_sample
        self._samples = 0
        self._global_step = 0

    def on_train_batch_end(
        self, trainer: pl.Trainer, pl_module: pl.LightningModule, outputs: Any, batch: Any, batch_idx: int
    ) -> None:
        self._samples += batch_samples(batch)
        if trainer.global_step == self._global_step:
            return  # a micro-batch inside an accumulation: the optimizer has not stepped
        self._global_step = trainer.global_step
        samples, self._samples = self._samples * trainer.world_size, 0
        if self.tokens_per_sample is None:
            meter.step(samples=samples)
        else:
            meter.step(tokens=samples * self.tokens_per_sample)
