"""What a step's loss moves per logit (launcher/compute/loss_bytes.py), counted from the ops torch dispatches: each
aten op's tensors the size of the logits, read once each and written, a gather or scatter by the target not
counted (it touches one logit a row)."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from torch.utils._python_dispatch import TorchDispatchMode

from launcher.compute.loss_bytes import LOSS_BYTES, loss_kind
from launcher.config.compose import compose_config
from launcher.perf import preset_fit
from launcher.perf.compute_term import shaped_mfu
from launcher.perf.plan_table import work_of

T, V = 64, 1000
"""Rows (tokens) and vocabulary of the logits: T · V elements is the size counted."""
BY_TARGET = {"nll_loss_forward", "nll_loss_backward", "index", "index_put_"}
"""Ops that read or write one logit a row by the target (a new tensor one returns, nll_loss_backward's zero-filled
gradient, is written whole: counted)."""


class Traffic(TorchDispatchMode):
    """Bytes of T·V-element tensors the dispatched ops move: distinct inputs read, outputs and the arguments the
    op's schema writes; views (an output sharing an input's storage, not written in place) move nothing."""

    def __init__(self) -> None:
        super().__init__()
        self.bytes = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        name = func.overloadpacket.__name__
        written = [a for a, arg in zip(args, func._schema.arguments) if arg.alias_info and arg.alias_info.is_write]
        written += [v for k, v in (kwargs or {}).items() if k == "out"]
        ins = {id(t): t for t in _big((args, kwargs))}
        outs = {id(t): t for t in [*_big(out), *_big(written)]}
        if func._schema.returns and all(r.alias_info and not r.alias_info.is_write for r in func._schema.returns):
            return out  # a view or detach: no data moved
        if name in BY_TARGET:  # touches a logit a row in place; a new tensor it returns is written whole
            ins, outs = {}, {i: t for i, t in outs.items() if i not in {id(a) for a in _big(args)}}
        self.bytes += sum(t.numel() * t.element_size() for t in [*ins.values(), *outs.values()])
        return out


def _big(tree) -> list[torch.Tensor]:
    if isinstance(tree, torch.Tensor):
        return [tree] if tree.numel() == T * V else []
    if isinstance(tree, (list, tuple)):
        return [t for x in tree for t in _big(x)]
    if isinstance(tree, dict):
        return [t for x in tree.values() for t in _big(x)]
    return []


class _MegatronVocabParallelCE(torch.autograd.Function):
    """megatron/core/tensor_parallel/cross_entropy.py @00611e6e's _VocabParallelCrossEntropy at tensor parallel 1
    (its all-reduces are over one rank), op for op: VocabParallelCrossEntropy's calculate_logits_max,
    calculate_predicted_logits, calculate_cross_entropy_loss, and backward's calculate_gradients."""

    @staticmethod
    def forward(ctx, logits, target):
        logits = logits.float()
        logits_max = torch.max(logits, dim=-1)[0]
        logits -= logits_max.unsqueeze(dim=-1)
        predicted = logits[torch.arange(logits.size(0)), target].clone().contiguous()
        exp_logits = logits
        torch.exp(logits, out=exp_logits)
        sum_exp = exp_logits.sum(dim=-1)
        loss = torch.log(sum_exp) - predicted
        exp_logits.div_(sum_exp.unsqueeze(dim=-1))
        ctx.save_for_backward(exp_logits, target)
        return loss

    @staticmethod
    def backward(ctx, grad_output):
        softmax, target = ctx.saved_tensors
        grad_input = softmax
        grad_input[torch.arange(grad_input.size(0)), target] -= 1.0
        grad_input.mul_(grad_output.unsqueeze(dim=-1))
        return grad_input, None


def _counted(loss_of) -> float:
    """Bytes per logit one forward and backward of `loss_of(logits, target)` moves, 16-bit logits in."""
    logits = torch.randn(T, V, dtype=torch.bfloat16, requires_grad=True)
    target = torch.randint(0, V, (T,))
    with Traffic() as seen:
        loss_of(logits, target).mean().backward()
    assert logits.grad is not None and logits.grad.dtype == torch.bfloat16
    return seen.bytes / (T * V)


def test_the_built_in_trainers_cross_entropy_moves_the_torch_count():
    """train/engines/ddp.py's loss as written: F.cross_entropy on a float32 copy of the logits. 36 B a logit (the
    copy 6, log-softmax 8, nll's gradient 4, log-softmax's backward 12, the cast back 6). Fails if the count is
    edited away from the kernels (16, as before this count)."""
    assert _counted(lambda x, y: F.cross_entropy(x.float().reshape(-1, V), y.reshape(-1))) == LOSS_BYTES["torch"]


def test_megatrons_vocab_parallel_cross_entropy_moves_its_count():
    """Megatron's vocab-parallel cross-entropy, its source's ops at tensor parallel 1: 52 B a logit (38 forward,
    14 backward with autograd's cast of its float32 gradient to the logits' bf16). Fails if the kind is priced as
    torch's (36) or a pass of the source is left out."""
    assert _counted(_MegatronVocabParallelCE.apply) == LOSS_BYTES["vocab_parallel"]


@pytest.mark.parametrize(
    ("overrides", "kind"),
    [([], "torch"), (["trainer.fused_loss=true"], "fused"), (["trainer.vocab_parallel_loss=true"], "vocab_parallel")],
)
def test_the_plan_prices_the_loss_its_trainer_runs(overrides, kind):
    """gpt_125m on an H100 (vocabulary 50,304 at width 768: the loss is a tenth of the step): the planned MFU moves
    with the trainer's loss as its bytes do, the fused kernel's 6 B fastest. Fails if compute_term ignores
    cfg.trainer (every kind then plans as torch's)."""
    assert loss_kind(compose_config(overrides, None).trainer) == kind
    fit = preset_fit.load()
    mfu = {}
    for name, extra in (("torch", []), ("mine", overrides)):
        cfg = compose_config(["model=gpt_125m", "cluster.device_name=NVIDIA H100 80GB HBM3", *extra], None)
        work = work_of(cfg)
        mfu[name] = shaped_mfu(
            cfg, executed_flops=work.executed_flops, peak_flops=work.peak.flops, dtype=work.dtype, fit=fit
        )[0]
    ordered = {"torch": mfu["mine"] == mfu["torch"], "fused": mfu["mine"] > mfu["torch"]}
    assert ordered.get(kind, mfu["mine"] < mfu["torch"])
