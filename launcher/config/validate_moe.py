"""Checks on a mixture-of-experts model's fields (model.n_experts > 0) that hold at every world
size; the per-size check (parallel.ep dividing dp, n_experts divisible by ep) is in
launcher/trials/layout.py."""

from __future__ import annotations

import math

from launcher.config.checks import at_least
from launcher.config.errors import ConfigError
from launcher.config.schema import LauncherConfig
from launcher.layouts import layout_names, traits


def check_moe(cfg: LauncherConfig) -> None:
    """model.n_experts and its companions, and parallel.ep where the layout splits experts."""
    m, par = cfg.model, cfg.parallel
    at_least("model.n_experts", m.n_experts, 0, 8)
    if traits(par.layout).splits("ep"):
        at_least("parallel.ep", par.ep or 0, 1, 2)
        if m.n_experts == 0:
            raise ConfigError(
                f"parallel.layout={par.layout} splits experts, but model.n_experts=0 (a dense model); "
                "set model.n_experts (e.g. model=tiny_moe) or use parallel=fsdp"
            )
    if m.n_experts == 0:
        return
    if m._target_ is not None or m.arch != "llama":
        what = f"model._target_={m._target_!r}" if m._target_ is not None else f"model.arch={m.arch}"
        raise ConfigError(
            f"model.n_experts={m.n_experts} makes the built-in llama blocks MoE blocks; {what} has none: "
            "set model.arch=llama, or model.n_experts=0"
        )
    at_least("model.experts_per_token", m.experts_per_token, 1, 2)
    if not 0 <= cfg.trainer.ep_dispatch_copies <= m.experts_per_token:
        raise ConfigError(
            f"trainer.ep_dispatch_copies={cfg.trainer.ep_dispatch_copies} must be in 0..{m.experts_per_token} "
            f"(model.experts_per_token): a token's dispatch sends at most one copy per routed expert (0: that many)"
        )
    for key, value in (("model.shared_experts", m.shared_experts), ("model.expert_ffn_hidden", m.expert_ffn_hidden)):
        at_least(key, value, 0, 0)
    if m.experts_per_token > m.n_experts:
        raise ConfigError(
            f"model.experts_per_token={m.experts_per_token} is more than model.n_experts={m.n_experts}; "
            f"route each token to at most {m.n_experts} experts"
        )
    if not 0 <= m.dense_layers < m.n_layers:
        raise ConfigError(
            f"model.dense_layers={m.dense_layers} must be in 0..{m.n_layers - 1} (model.n_layers={m.n_layers}): "
            "at least one block must be an MoE block"
        )
    if not (math.isfinite(m.aux_loss_coef) and m.aux_loss_coef >= 0):
        raise ConfigError(f"model.aux_loss_coef={m.aux_loss_coef} must be a number ≥ 0; set e.g. 0.01")
    row = traits(par.layout)
    # The whole-model layouts and those splitting experts; TP and pipelines would need the
    # router's dispatch inside their own splits: not built.
    if not (row.splits("ep") or row.whole_model):
        takers = layout_names(lambda r: r.whole_model or r.splits("ep"))
        raise ConfigError(
            f"parallel.layout={par.layout} does not run a mixture-of-experts model (model.n_experts="
            f"{m.n_experts}); use {' or '.join(f'parallel={t}' for t in takers)}"
        )
