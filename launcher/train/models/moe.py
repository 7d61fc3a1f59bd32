"""Mixture-of-experts blocks (model.n_experts > 0 on arch=llama): a softmax router sends each
token to its top-k experts (bias-free SwiGLUs, Mixtral's and DeepSeek's expert), optional shared
experts see every token, and a load-balancing loss keeps the routing spread.

Routing is capacity-free: every token reaches all k of its experts, none is dropped, whatever
the load (no capacity factor, as Mixtral and DeepSeek-V3 train). So a token's output depends on
its own router scores only, never on the other tokens of its batch or rank, and every layout
computes what the 1-process reference computes: parity holds exactly (up to summation order).

The routed slots are sorted by expert (stable), each expert runs once on its rows, and the
outputs go back to their slots and are summed in slot order (fixed: the same on every layout).
Under expert parallelism (`Experts.group`, set by engines/ep.py) the sorted rows are sent to the
rank holding their expert by one all-to-all (dispatch) and back by another (combine); each
rank holds n_experts ÷ ep of them, under their global index (`experts.5.w1.weight`), so names
and initial values are the reference's.

The load-balancing loss (Switch Transformer, Fedus et al. 2021; GShard): α·E·Σᵢ fᵢ·Pᵢ with fᵢ
the share of routed slots sent to expert i and Pᵢ its mean router probability, computed per
sequence and averaged over the batch (DeepSeek-V3's sequence-wise form, arXiv 2412.19437 §2.1.2):
per sequence, the mean over any split of the batch (ranks, micro-batches) is the global batch's,
so the loss too has parity. The engines add `aux_loss(model)` to the cross-entropy."""

from __future__ import annotations

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import nn

from launcher.train.models.common import PreNormBlock
from launcher.train.models.llama import SwiGLU, attention_half


class _AllToAll(torch.autograd.Function):
    """all_to_all_single with autograd: rows `in_splits[j]` go to rank j, `out_splits[j]` come
    from it; backward sends the gradients back the same way reversed."""

    @staticmethod
    def forward(ctx, x: torch.Tensor, out_splits: list[int], in_splits: list[int], group) -> torch.Tensor:
        ctx.splits, ctx.group = (out_splits, in_splits), group
        out = x.new_empty((sum(out_splits), *x.shape[1:]))
        dist.all_to_all_single(out, x.contiguous(), out_splits, in_splits, group=group)
        return out

    @staticmethod
    def backward(ctx, grad: torch.Tensor):
        out_splits, in_splits = ctx.splits
        back = grad.new_empty((sum(in_splits), *grad.shape[1:]))
        dist.all_to_all_single(back, grad.contiguous(), in_splits, out_splits, group=ctx.group)
        return back, None, None, None


class _ScaleGrad(torch.autograd.Function):
    """Identity forward; backward multiplies the gradient by `scale`."""

    @staticmethod
    def forward(ctx, x: torch.Tensor, scale: float) -> torch.Tensor:
        ctx.scale = scale
        return x.view_as(x)

    @staticmethod
    def backward(ctx, grad: torch.Tensor):
        return grad * ctx.scale, None


class Experts(nn.ModuleDict):
    """The routed experts this rank holds, keyed by global index ("0".."E-1" without expert
    parallelism; this rank's n_experts ÷ ep under it). A ModuleDict with a forward, so that FSDP
    can make it a unit of its own (sharded over the ranks holding the same experts)."""

    def __init__(self, n_experts: int, d_model: int, hidden: int) -> None:
        super().__init__({str(e): SwiGLU(d_model, hidden) for e in range(n_experts)})
        self.n_experts = n_experts
        self.group = None
        """The expert-parallel process group (engines/ep.py); None: every expert is here."""
        self.weight_grad_scale = 1.0
        """Factor on the experts' weight gradients only (engines/ep.py: 1/ep, as FSDP averages them
        over dp ÷ ep ranks but they hold dp ranks' contributions); the tokens' gradients keep theirs."""

    def forward(self, rows: torch.Tensor, counts: list[int]) -> torch.Tensor:
        """`rows` sorted by expert, `counts[e]` of them for expert e (all n_experts): each row
        through its expert, returned in the same order."""
        if self.group is None:
            return self._run(rows, counts, [int(k) for k in self])
        ep, me = dist.get_world_size(self.group), dist.get_rank(self.group)
        local = self.n_experts // ep
        # Per (source rank, local expert) row counts: each rank sends its counts for my experts.
        sent = torch.tensor(counts, dtype=torch.int64, device=rows.device)  # NCCL exchanges device tensors only
        got = torch.empty_like(sent)
        dist.all_to_all_single(got, sent, group=self.group)
        got = got.view(ep, local)
        send = [sum(counts[r * local : (r + 1) * local]) for r in range(ep)]
        recv = got.sum(1).tolist()
        mine = _AllToAll.apply(rows, recv, send, self.group)
        # Rows arrive source-major; the experts want them expert-major, and back again after.
        pieces = mine.split(got.flatten().tolist())
        order = [s * local + e for e in range(local) for s in range(ep)]
        by_expert = torch.cat([pieces[i] for i in order]) if pieces else mine
        out = self._run(by_expert, got.sum(0).tolist(), list(range(me * local, (me + 1) * local)))
        back = out.split([int(got[s, e]) for e in range(local) for s in range(ep)])
        source_major = torch.cat([back[e * ep + s] for s in range(ep) for e in range(local)]) if back else out
        return _AllToAll.apply(source_major, send, recv, self.group)

    def _run(self, rows: torch.Tensor, counts: list[int], experts: list[int]) -> torch.Tensor:
        """Rows grouped by `experts` in that order, counts[i] of them for experts[i], each
        through its own expert."""
        scale = self.weight_grad_scale
        if scale != 1.0:  # the rows' gradient is scaled back on its way out: only the weights' keeps it
            rows = _ScaleGrad.apply(rows, 1.0 / scale)
        pieces = rows.split(counts)
        out = torch.cat([self[str(e)](p) for e, p in zip(experts, pieces, strict=True)])
        return _ScaleGrad.apply(out, scale) if scale != 1.0 else out


class MoE(nn.Module):
    """Router + routed experts (+ shared experts): the feed-forward of a MoE block."""

    def __init__(self, d_model: int, hidden: int, *, n_experts: int, top_k: int, shared: int, aux_coef: float) -> None:
        super().__init__()
        self.top_k, self.aux_coef = top_k, aux_coef
        self.router = nn.Linear(d_model, n_experts, bias=False)
        self.experts = Experts(n_experts, d_model, hidden)
        # The shared experts as one SwiGLU of their summed width: the same function, one matmul each.
        self.shared = SwiGLU(d_model, shared * hidden) if shared else None
        self.aux: torch.Tensor | None = None
        """This forward's load-balancing loss (coefficient applied), taken by `aux_loss`."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, d = x.shape
        h = x.reshape(-1, d)
        probs = self.router(h).float().softmax(-1)  # [tokens, E]
        weights, chosen = probs.topk(self.top_k, dim=-1)  # [tokens, k]
        weights = weights / weights.sum(-1, keepdim=True)
        if self.aux_coef and self.training:
            self.aux = self.aux_coef * balance_loss(probs.view(b, t, -1), chosen.view(b, t, -1))
        slots = chosen.flatten()
        order = slots.argsort(stable=True)
        if h.is_meta:  # FLOP counting on meta: any split has the same rows; an even one stands in
            n = slots.numel() // self.experts.n_experts
            counts = [n] * self.experts.n_experts
            counts[-1] += slots.numel() - n * len(counts)
        else:
            counts = torch.bincount(slots, minlength=self.experts.n_experts).tolist()
        out = self.experts(h[order // self.top_k], counts)
        routed = torch.empty_like(out).index_copy(0, order, out).view(-1, self.top_k, d)
        y = (routed * weights.unsqueeze(-1).to(routed.dtype)).sum(1)
        if self.shared is not None:
            y = y + self.shared(h)
        return y.view(b, t, d)


def balance_loss(probs: torch.Tensor, chosen: torch.Tensor) -> torch.Tensor:
    """E·Σᵢ fᵢ·Pᵢ per sequence, averaged over the batch: `probs` [b, t, E] the router's
    softmax, `chosen` [b, t, k] the routed experts. 1 when routing is perfectly even."""
    n_experts, k = probs.shape[-1], chosen.shape[-1]
    share = F.one_hot(chosen, n_experts).sum(2).float().mean(1) / k  # fᵢ: [b, E], each row sums to 1
    return n_experts * (share * probs.mean(1)).sum(-1).mean()


def aux_loss(model: nn.Module) -> torch.Tensor | float:
    """The load-balancing losses of the forward just run, summed over its MoE blocks (0.0 for a
    dense model), each taken once: the engines add it to a micro-step's loss."""
    total: torch.Tensor | float = 0.0
    for module in model.modules():
        if isinstance(module, MoE) and module.aux is not None:
            total, module.aux = total + module.aux, None
    return total


class MoEBlock(PreNormBlock):
    """A Llama block whose SwiGLU is a `MoE`. `checkpointing` as gpt.Block's."""

    def __init__(
        self,
        d_model: int,
        n_heads: int,
        n_kv_heads: int,
        hidden: int,
        *,
        n_experts: int,
        top_k: int,
        shared: int,
        aux_coef: float,
        rope_theta: float,
        norm_eps: float,
        checkpointing: str = "none",
        head_dim: int | None = None,
    ) -> None:
        super().__init__()
        attention_half(
            self,
            d_model,
            n_heads,
            n_kv_heads,
            rope_theta=rope_theta,
            norm_eps=norm_eps,
            checkpointing=checkpointing,
            head_dim=head_dim,
        )
        self.ffn = MoE(d_model, hidden, n_experts=n_experts, top_k=top_k, shared=shared, aux_coef=aux_coef)
