"""`MeterCallback` for the Hugging Face Trainer: `trainer.add_callback(MeterCallback(tokens_per_sample=L))`
and `job.metrics: hf`. Needs the `hf` extra (transformers)."""

from __future__ import annotations

from transformers import TrainerCallback, TrainerControl, TrainerState, TrainingArguments

from launcher import meter


def samples_per_step(args: TrainingArguments) -> int:
    """The whole job's samples in one optimizer step, as the Trainer batches them: per-device batch ×
    gradient accumulation × data-parallel world size."""
    return args.per_device_train_batch_size * args.gradient_accumulation_steps * args.world_size


class MeterCallback(TrainerCallback):
    """Calls `meter.step` at the end of each optimizer step (on_step_end: after the accumulated micro-batches'
    optimizer step), with the whole job's tokens when `tokens_per_sample` (the sequence length) is given, else
    its samples (launcher then multiplies by job.tokens_per_sample)."""

    def __init__(self, *, tokens_per_sample: int | None = None) -> None:
        self.tokens_per_sample = tokens_per_sample

    def on_step_end(
        self, args: TrainingArguments, state: TrainerState, control: TrainerControl, **kwargs: object
    ) -> None:
        samples = samples_per_step(args)
        if self.tokens_per_sample is None:
            meter.step(samples=samples)
        else:
            meter.step(tokens=samples * self.tokens_per_sample)
