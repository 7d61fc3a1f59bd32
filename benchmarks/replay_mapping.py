"""One row of benchmarks/data/published_scaling.csv → the `launcher plan` overrides that describe
it, what was assumed on the way, and the published per-GPU figure; or why the tool cannot say
it (`Unexpressible`). Pure: nothing here composes or predicts (published_replay.py does).

Layouts map by the bytes their data-parallel dimension moves per step (see LAYOUTS): Megatron's
data parallel with its distributed optimizer and DeepSpeed's ZeRO-1 reduce-scatter gradients and
all-gather parameters once, one all-reduce's bytes, which is FSDP without resharding after
forward (`parallel.reshard_after_forward=false`, ≈ ZeRO-2), so their tp/pp rows become
fsdp_tp / fsdp_tp_pp that way; plain data parallel stays ddp, and with pp only it is dp_pp.
Issue 24's layouts: HSDP rows are `parallel=hsdp` sharded within a node (`parallel.shard`); a row with
context parallel (cp > 1) takes the `_cp` layout of the one it maps to (fsdp_cp, fsdp_tp_cp,
fsdp_tp_pp_cp; Megatron's plain data parallel with cp is fsdp_cp without resharding); expert-parallel
rows are fsdp_ep with `parallel.ep` and the MoE model fields; fp8 rows are `precision=fp8`.

What a source's trainer keeps in memory unlike the built-in one (config/schema_trainer.py) is set
where its configuration says so (TRAINERS, FUSED_RMSNORM, TORCHTITAN_SELECTIVE, DEVICE_MEMORY), so
the memory estimate of a published configuration is of the trainer that ran it.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from typing import Any

LAYOUTS: dict[str, tuple[str, bool | None, str]] = {
    # source layout: (launcher layout, reshard_after_forward or None where it does not apply, why)
    "fsdp": ("fsdp", True, "FSDP FULL_SHARD"),
    "zero2": ("fsdp", False, "FSDP SHARD_GRAD_OP = fsdp with reshard_after_forward=false"),
    "ddp": ("ddp", None, "data parallel, one all-reduce of the gradients"),
    "ddp_pp": ("dp_pp", None, "data parallel × pipeline"),
    "ddp_tp": ("fsdp_tp", False, "Megatron DP (distributed optimizer) × TP: one all-reduce's bytes"),
    "ddp_tp_pp": ("fsdp_tp_pp", False, "Megatron DP (distributed optimizer) × TP × PP: one all-reduce's bytes"),
    "zero1_tp_pp": ("fsdp_tp_pp", False, "DeepSpeed ZeRO-1 × TP × PP: one all-reduce's bytes"),
    "fsdp_tp": ("fsdp_tp", True, "FSDP × TP"),
    "fsdp_tp_pp": ("fsdp_tp_pp", True, "FSDP × TP × PP"),
    "fsdp_ep": ("fsdp_ep", True, "FSDP × expert parallel (`parallel.ep` of the dp ranks)"),
}
SYNC_EACH_MICROSTEP = {"fsdp", "zero2", "fsdp_tp"}
"""Source layouts whose FSDP reduce-scatters after every accumulation micro-step: Composer (llm-foundry)
wraps no FSDP model in `no_sync` (composer/trainer/dist_strategy.py ddp_sync_context returns early for
anything but DDP), and torchtitan's FSDP2 keeps gradient sync on. Megatron's rows keep a whole
gradient buffer however they reduce, which the launcher's default (sync at the last micro-step) models."""
HSDP = {"hsdp": ("hsdp", True, "HSDP (HYBRID_SHARD): FSDP within a shard group of one node's GPUs, replicated across")}
"""Source layouts sharded within a group and replicated across: `parallel=hsdp parallel.shard=<GPUs per node>`."""
WITH_CP = {"fsdp": "fsdp_cp", "fsdp_tp": "fsdp_tp_cp", "fsdp_tp_pp": "fsdp_tp_pp_cp"}
"""The launcher layout a row with context parallel (cp > 1) takes, by the layout its source layout maps to
(Megatron's data parallel with cp averages gradients over dp × cp, as FSDP over dp × cp does: ddp → fsdp_cp)."""
CP_OF_DP = {"ddp": ("fsdp", False)}
"""Plain data parallel rows with cp: Megatron's distributed optimizer over dp × cp, one all-reduce's bytes."""
# (pattern in the row's interconnect text, inter_link, NICs per node or None: one per GPU, note)
INTERCONNECTS = (
    (r"400 Gb/s per GPU", "ib400", None, ""),
    (r"1600 Gb/s per node", "ib200", 8, "1600 Gb/s per node read as 8 × 200 Gb/s"),
    (r"ib200x8", "ib200", 8, ""),
    (r"ib400x8", "ib400", 8, ""),
    (r"^400 Gb/s inter-node", "ib400", 1, "400 Gb/s read as per node (the source does not say)"),
    (r"^800 Gb/s inter-node", "ib400", 2, "800 Gb/s read as per node, 2 × 400 (the source does not say)"),
    (r"Omni-Path", "eth100", 4, "Omni-Path 100 Gb/s as eth100 (same rate; its latency preset is TCP's, higher)"),
)
TRAINERS: dict[str, tuple[tuple[str, ...], str]] = {
    # source: (trainer.* overrides, where the source's configuration says so)
    "llmfoundry_mpt": (
        ("trainer.fused_loss=true", "trainer.norm_16bit=true"),
        "llm-foundry @5e85bd62: MPT's loss_fn defaults to fused_crossentropy (flash-attn's), "
        "scripts/train/benchmarking/submit_benchmarks.py sets norm_type=low_precision_layernorm",
    ),
    "megatron_core_2024": (
        ("trainer.distributed_optimizer=true",),
        "Megatron-LM README: --overlap-param-gather, which runs only with --use-distributed-optimizer; bf16",
    ),
    "nemo_perf_2407": (
        (
            "trainer.distributed_optimizer=true",
            "trainer.master_weight_remainders=true",
            "trainer.norm_16bit=true",
            "trainer.fused_swiglu=true",
            "trainer.vocab_parallel_loss=true",
            "trainer.grad_sync_16bit=true",
        ),
        "NeMo-Framework-Launcher launcher_scripts/conf/training: llama/llama2_7b.yaml @064e6769, "
        "gpt3/5b.yaml @00af8f26: optim.name distributed_fused_adam, Megatron's distributed optimizer; "
        "llama/llama3_8b.yaml, gpt3/20b.yaml @1a7171d7 (July 2024): mcore_gpt and transformer_engine true, "
        "fp32_residual_connection false: Transformer Engine's LayerNormLinear keeps the 16-bit input and output; "
        "llama configs: activation fast-swiglu with bias_activation_fusion true, Megatron-core's bias_swiglu_impl "
        "(megatron/core/fusions/fused_bias_swiglu.py SwiGLUFunction saves its input only); mcore_gpt's loss is "
        "Megatron's vocab-parallel cross-entropy (megatron/core/tensor_parallel/cross_entropy.py: one float32 copy "
        "worked in place); NeMo's megatron_base_model.setup_optimization sets Apex's store_param_remainders for "
        "bf16 weights with a float32 optimizer; its H100 examples add +training.model.optim.grad_sync_dtype=bf16 "
        "(examples/training/gpt/h100/20b_fp8_8node.sh @273c9427: GPT3-20B tp 2, micro batch 2, fp8, as the table's "
        "row; 20b_bf16_8node.sh, llama3 70b bf16/fp8 likewise)",
    ),
    "nemo_long_seq_2505": (
        (
            "trainer.distributed_optimizer=true",
            "trainer.norm_16bit=true",
            "trainer.fused_swiglu=true",
            "trainer.vocab_parallel_loss=true",
        ),
        "NeMo 2.0 recipes: nemo/collections/llm/recipes/optim/adam.py, distributed_fused_adam_with_cosine_annealing "
        "(the pretraining recipes' optimizer) sets use_distributed_optimizer=True; container NeMo 24.03.01, whose "
        "launcher configs (llama/llama2_7b.yaml) set mcore_gpt and transformer_engine true: Transformer Engine's "
        "fused LayerNormLinear keeps the 16-bit input and output; activation fast-swiglu with bias_activation_fusion "
        "true: Megatron-core's fused SwiGLU saves its input only; mcore_gpt's vocab-parallel cross-entropy (one "
        "float32 copy in place)",
    ),
}
TRAINERS["automodel_ephybrid_2607"] = (
    (
        "trainer.weights_16bit=true",
        "trainer.experts_outside_fsdp=true",
        "trainer.norm_16bit=true",
        "trainer.ep_dispatch_copies=1",
    ),
    "NeMo AutoModel @60dfabfe: recipe examples/llm_benchmark/qwen/qwen3_moe_30b_te_deepep.yaml builds the model "
    "with NeMoAutoModelForCausalLM.from_config and no torch_dtype, whose 'auto' is bfloat16 "
    "(nemo_automodel/_transformers/auto_model.py), optimizer torch.optim.Adam (moments in the parameters' dtype); "
    "nemo_automodel/components/moe/parallelizer.py apply_fsdp leaves the experts out of FSDP (ignored_params) when "
    "the ep-shard mesh is 1 (dp = ep at both sizes); backend rms_norm: te (Transformer Engine's RMSNorm, 16-bit "
    "output); backend dispatcher: deepep with fake_balanced_gate: true, whose FakeBalancedGate "
    "(nemo_automodel/components/moe/layers.py) routes token i to experts 8i..8i+7 mod 128, all on one rank at ep 8 and "
    "16, and DeepEP sends a token once per destination rank (docs/deepep_vs_hybridep_benchmark.md: 'per-token "
    "deduplicated destination bytes'): one copy a token; not mapped: MaskedCrossEntropy fp32_upcast false "
    "(16-bit logits, no setting for torch's cross-entropy on them: counted at 14 bytes a logit) and "
    "MoEParallelizerConfig.reshard_after_forward False (a layout setting: the rows keep the layout's resharding)",
)
TORCHTITAN_FSDP = (
    ("trainer.pipeline_fsdp_16bit=true",),
    "torchtitan torchtitan/parallelisms/parallelize_llama.py @9dec370 apply_fsdp: fully_shard with its "
    "MixedPrecisionPolicy (bf16 parameters) whatever pp is, reshard_after_forward=False under pp",
)
TORCHTITAN_SOURCES = ("torchtitan_a100_2024", "torchtitan_h100_2024", "torchtitan_asynctp_2025")
TRAINERS |= {src: TORCHTITAN_FSDP for src in TORCHTITAN_SOURCES}
"""What a source's trainer keeps in memory other than the built-in trainer (config/schema_trainer.py)."""
FMS_SELECTIVE = (
    2,
    "fms-fsdp @9137d48 fms_fsdp/policies/ac_handler.py: `selective_checkpointing` n wraps every n-th block whole; "
    "the blog states 'Selective' for 13B, not n, but its HFU ÷ MFU does: full AC (34B, 70B on A100) gives "
    "1.34-1.36, so every n-th block gives 1 + 0.35/n: 1.17 for n = 2, 1.12 for n = 3; 13B on A100 reads "
    "0.59/0.51, 1.14-1.18 within the table's rounding: n = 2",
)
"""fms-fsdp's `selective` (pytorch_fsdp_blog_2024): every n-th block checkpointed whole, not the launcher's
`selective` (the attention core recomputed): trainer.checkpoint_every_nth_block=n on top of `none`."""
FUSED_RMSNORM = {
    ("torchtitan_a100_2024", "Llama-2-13B"): "train_configs/llama2_13b.toml @157a12c5: norm_type fused_rmsnorm",
    ("torchtitan_a100_2024", "Llama-3-8B"): "train_configs/llama3_8b.toml @157a12c5: norm_type fused_rmsnorm",
}
"""torchtitan runs whose config names the fused (Triton) RMSNorm; its 70B configs and the Dec 2024 8B
(train_configs/llama3_8b.toml @9dec370) name `rmsnorm`."""
TORCHTITAN_SELECTIVE = {
    "torchtitan_a100_2024": "the row's own words ('selective op' / 'selective layer')",
    "torchtitan_h100_2024": "train_configs/llama3_8b.toml @9dec370 (the tested commit): selective_ac_option='op'",
    "torchtitan_asynctp_2025": "the table's own words ('per op SAC')",
}
"""torchtitan's `selective` is per-op (model.activation_checkpointing=op) unless the row says 'selective layer'."""
CHECKPOINTING_OF_SOURCE = {
    "nous_deepep_2511": (
        "full",
        "NousResearch/torchtitan's DeepEP configs: qwen3_10b_a1b_with_deepep.toml @042e7844 (the fork on the README's "
        "date, 2025-11-24) and qwen3_30b_a3b_with_deepep.toml @a8560ae3 (the file its quick start names, 2026-01-08) "
        "set [activation_checkpoint] mode = 'full'",
    )
}
"""Sources whose table does not state activation checkpointing but whose own configuration does."""
ONE_LAYER_CHUNKS = {
    "llama3_meta_2024": "arXiv 2407.21783 §3.3.2: 'we reduce one Transformer layer each from the first and the last "
    "stages ... the first model chunk on the first stage has only the embedding, and the last model chunk on the "
    "last stage has only output projection and loss', with 'an interleaved schedule ... with V pipeline stages on "
    "one pipeline rank': a chunk is one layer, so V = (126 layers + the two end chunks) ÷ PP 16 = 8",
    "megatron_core_2024": "README @f2e5db40: 'pipeline-parallel communication (enabled by default)' overlapped with "
    "compute, which Megatron-LM at that commit runs only on the interleaved schedule (megatron/training/arguments.py: "
    "'Setting args.overlap_p2p_comm to False since non-interleaved schedule does not support overlapping p2p "
    "communication'); a virtual stage's layers divide a stage's, and the 119B's 23 and the 462B's 7 layers a stage "
    "are prime: one-layer chunks, the one interleaving every row of the table admits",
}
"""Sources whose pipeline interleaves model chunks of one Transformer layer each: interleaved 1F1B with
virtual_stages = the planned layers ÷ pp (the schedule the replay without it priced as plain 1F1B)."""
MEMORY_NOT_EXPRESSED = {
    "llama3_meta_2024": "pre-trained at 8K without activation checkpointing on a pipeline schedule it modified for "
    "'memory imbalance' (the first stage's warm-up micro-batches), freeing each stage's input and output tensors "
    "once used (arXiv 2407.21783 §3.3.2)",
}
"""What a source did for memory that no launcher setting expresses: said in its rows' memory verdict where the
estimate without it does not fit (benchmarks/replay_memory.py), as a CPU offload is."""
STATED_VP = (
    r"virtual pipeline VP=(\d+)",
    "the source's table prints its virtual pipeline degree (NeMo's performance summary: the 'VP' column, "
    "Megatron-Core's interleaved 1F1B with VP model chunks a pipeline rank)",
)
"""A row whose notes carry the table's `VP`: interleaved 1F1B with that many virtual stages where VP > 1."""
DEVICE_MEMORY = ((r"96GB", 96, "96 GB per GPU, as the hardware name says"),)
"""Hardware whose name gives a memory the peak table's entry for the part does not (GiB, as
cluster.device_memory_gb reads it)."""
POWER_LIMIT = (
    r"-(\d+)W$",
    "its board power limit, as the hardware name says: torchtitan's Grand Teton H100s ran 'the default 500W power "
    "limit, although tuning it up to 700W TDP can potentially provide further speedups' (pytorch/torchtitan "
    "benchmarks/asyncTP_llama3_h100_2025-06_torchtitan.md @2887250b; the Dec 2024 rows' notes record the same "
    "hardware)",
)
"""A hardware name ending `-<N>W` ran at a board power limit of N W: cluster.power_limit_w (compute/power.py)."""
DEFAULT_NETWORK = {"H100": ("ib400", 8, "DGX H100"), "A100": ("ib200", 8, "DGX A100")}
"""Network of a row that does not state one: the vendor reference node of its GPU."""

# Issue 24's corpus, second pass (MoE and HSDP sources): GPUs past A100/H100, whose node the vendor's
# reference system describes (in-node link, NICs), as DEFAULT_NETWORK does for A100 and H100.
NODE_OF_GPU = {
    "B200": (
        "nvlink5",
        # An 8 × B200-SXM-180GB node as MLPerf describes one: "18x 5th Gen NVLink", "8x ConnectX-7 IB NDR 400Gb/s"
        # (mlcommons/inference_results_v6.0 closed/Nebius/systems/nebius_b200_n1.json).
        ("ib400", 8, "an 8 × B200 node's 8 × ConnectX-7 NDR 400 Gb/s (MLPerf's nebius_b200_n1 system description)"),
    ),
}
"""GPU family → (in-node link preset, network of a row that does not state one)."""

# Issue 24's corpus, third pass (NeMo AutoModel's DeepEP/HybridEP report): its "per GPU pair" is the link
# between two GPUs on two nodes, as its "NVLink ~160 GB/s/dir per pair" is between two GPUs of a node.
INTERCONNECTS += (
    (r"400 Gb/s InfiniBand per GPU pair", "ib400", None, "'400 Gb/s InfiniBand per GPU pair' read as one NIC per GPU"),
)


def _family(row: dict) -> str:
    """The row's GPU family among those the mapping knows a node of (A100 where none matches)."""
    hardware = str(row["hardware"])
    return next((f for f in (*NODE_OF_GPU, "H100") if f in hardware), "A100")


def _intra_link(row: dict) -> str:
    """The in-node link preset: the GPU's own NVLink generation where NODE_OF_GPU names it, else `nvlink`
    (the preset every A100 and H100 row has been replayed on)."""
    return NODE_OF_GPU[family][0] if (family := _family(row)) in NODE_OF_GPU else "nvlink"


MOE_FIELDS = ("n_experts", "experts_per_token", "shared_experts", "expert_ffn_hidden", "dense_layers")
HEAD_DIM_OF_MODEL = {
    "Qwen3-30B-A3B": (128, "Qwen/Qwen3-30B-A3B config.json: head_dim 128, num_attention_heads 32, hidden_size 2048"),
}
"""Corpus models whose published config sets the head width apart from d_model / n_heads (model.head_dim);
every other model's config gives d / H (Llama 2/3: 128, GPT/MPT/BLOOM/MT-NLG likewise)."""
"""Corpus columns of a mixture-of-experts row, passed as the model fields of the same name."""


class Unexpressible(Exception):
    """The row's configuration has no launcher equivalent; the message says what."""


@dataclass(kw_only=True, frozen=True)
class Mapped:
    """A published row as `launcher plan` arguments."""

    overrides: list[str]
    """Hydra overrides for compose_config (model, parallel, batch, precision, cluster)."""
    gpus: int
    """The size to plan: the row's GPU count."""
    layout: str
    """The launcher layout the source's layout maps to."""
    assumed: list[str] = field(default_factory=list)
    """What the row does not state and the mapping assumed, one phrase each."""
    offload: str = ""
    """What the source kept in CPU memory (its `offload` column: e.g. `optimizer state`), which no launcher
    setting expresses; '' where nothing was offloaded."""
    memory_not_expressed: str = ""
    """What else the source did for memory that no launcher setting expresses (MEMORY_NOT_EXPRESSED); ''."""


def num(value: Any) -> float | None:
    """A CSV cell as a number; None where it is empty."""
    if value is None or value == "":
        return None
    x = float(value)
    return None if math.isnan(x) else x


def technique(row: dict) -> str:
    """What tells apart runs of one source, model and size that differ only in software (torchtitan's
    'FSDP' vs 'FSDP + torch.compile'): the notes' `technique '…'`, '' where there is none."""
    found = re.search(r"technique '([^']+)'", str(row.get("notes") or ""))
    return found.group(1) if found else ""


ONE_EXPERIMENT = {
    "torchtitan_h100_2024": "Tables 1 and 3 are Llama 3.1 8B at 8 and 128 GPUs of one setup "
    "(the corpus README reads them as one series)"
}
"""Sources whose tables split one scaling experiment: their series ignore the table."""


def series_key(row: dict, *, same_micro: bool = True) -> tuple:
    """Rows of one scaling series: same source table (the runs the source presents together), model,
    layout and degrees, precision, checkpointing, hardware, sequence length, technique and micro
    batch: one recipe, differing only in size (and the global batch that follows it), as a
    launcher sweep scales one recipe. `same_micro=False` joins runs of other micro batches too
    (the replay reports those pairs apart: a per-GPU rate that changes with the micro batch is a
    compute effect, not scaling)."""
    table = str(row.get("citation"))
    if row["source"] in ONE_EXPERIMENT:
        table = re.sub(r",? Tables? \d+", "", table)
    cols = (
        "source",
        "model",
        "layout",
        "tp",
        "pp",
        "cp",
        "precision",
        "activation_checkpointing",
        "hardware",
        "seq_len",
    )
    micro = (str(row.get("micro_batch")),) if same_micro else ()
    return (table, *(str(row.get(c)) for c in cols), technique(row), *micro)


def _network(row: dict) -> tuple[str, int, str]:
    text = str(row.get("interconnect") or "")
    for pattern, link, nics, note in INTERCONNECTS:
        if text and re.search(pattern, text):
            return link, int(num(row.get("nics_per_node")) or nics or num(row["gpus_per_node"])), note
    family = _family(row)
    link, nics, ref = NODE_OF_GPU[family][1] if family in NODE_OF_GPU else DEFAULT_NETWORK[family]
    return link, nics, f"network not stated: {ref}'s {nics} × {link}"


def _degrees(row: dict) -> tuple[int, int, int, int]:
    """(dp, tp, pp, cp): world = dp × cp × tp × pp."""
    tp, pp, cp = num(row.get("tp")), num(row.get("pp")), num(row.get("cp")) or 1
    if tp is None or pp is None:
        raise Unexpressible("tp/pp not published")
    gpus = int(row["gpus"])
    dp = num(row.get("dp")) or gpus / (tp * pp * cp)
    if dp * tp * pp * cp != gpus:
        raise Unexpressible(f"dp({dp:g}) × cp({cp:g}) × tp({tp:g}) × pp({pp:g}) ≠ gpus({gpus})")
    return int(dp), int(tp), int(pp), int(cp)


def _layout(source_layout: str, cp: int) -> tuple[str, bool | None]:
    """The launcher layout and reshard_after_forward of a source layout at context-parallel degree cp."""
    if source_layout in HSDP:
        return HSDP[source_layout][:2]
    if source_layout not in LAYOUTS:
        raise Unexpressible(f"layout {source_layout!r} is not mapped")
    layout, reshard, _ = LAYOUTS[source_layout]
    if cp > 1:
        layout, reshard = CP_OF_DP.get(source_layout, (layout, reshard))
        if layout not in WITH_CP:
            raise Unexpressible(f"layout {source_layout!r} with context parallel (cp={cp}) is not mapped")
        layout = WITH_CP[layout]
    return layout, reshard


def _precision_and_checkpointing(row: dict, assumed: list[str]) -> list[str]:
    precision = str(row.get("precision") or "")
    if precision in ("", "nan"):
        precision = "bf16"
        assumed.append("precision not published: bf16 (fp16 has the same A100/H100 peak)")
    elif precision not in ("bf16", "fp16", "fp8"):
        raise Unexpressible(f"precision {precision} has no launcher equivalent (bf16, fp16, fp8, fp32)")
    ckpt = str(row.get("activation_checkpointing") or "unknown")
    if ckpt == "selective" and row["source"] in TORCHTITAN_SELECTIVE:
        if "selective layer" in str(row.get("notes")):
            # Every second block recomputed whole: no launcher setting; selective keeps at least as much.
            assumed.append("torchtitan's 'selective layer' (every 2nd block recomputed) planned as selective")
        else:
            ckpt = "op"
            assumed.append(f"selective = torchtitan's per-op policy: {TORCHTITAN_SELECTIVE[row['source']]}")
    if ckpt == "unknown" and row["source"] in CHECKPOINTING_OF_SOURCE:
        ckpt, why = CHECKPOINTING_OF_SOURCE[row["source"]]
        assumed.append(f"activation checkpointing {ckpt}: {why}")
    if ckpt not in ("none", "selective", "op", "full"):
        # A figure counting recompute as work (hfu only) says full recomputation; else Megatron's default.
        ckpt = "full" if num(row.get("hfu")) and not num(row.get("mfu")) else "selective"
        assumed.append(f"activation checkpointing not published: {ckpt}")
    return [f"precision={precision}", f"model.activation_checkpointing={ckpt}"]


def _model(row: dict, pp: int, assumed: list[str]) -> list[str]:
    arch = str(row["arch"])
    slug = re.sub(r"[^A-Za-z0-9_.-]+", "_", str(row["model"])).strip("_")
    out = [f"model={'llama3_8b' if arch == 'llama' else 'gpt_1_3b'}", f"model.name={slug}", f"model.arch={arch}"]
    layers = int(num(row["n_layers"]))
    if layers % pp:
        # Llama 3 gives its first and last stage one layer fewer (126 over 16 stages, arXiv 2407.21783 §3.3.2);
        # Megatron-DeepSpeed counts the embeddings as stage layers (BLOOM's 70 over 12): equal stages here.
        layers = -(-layers // pp) * pp
        assumed.append(f"{int(num(row['n_layers']))} layers over pp={pp} stages planned as {layers} (equal stages)")
    out.append(f"model.n_layers={layers}")
    out += [f"model.{k}={int(num(row[k]))}" for k in ("d_model", "n_heads", "ffn_hidden", "seq_len")]
    # Mixture of experts (columns absent or 0: dense): the model fields of issue 24's MoE model.
    out += [f"model.{k}={int(num(row[k]))}" for k in MOE_FIELDS if num(row.get(k))]
    if num(row.get("vocab_size")) is None:
        raise Unexpressible("vocabulary not published")
    out.append(f"model.vocab_size={int(num(row['vocab_size']))}")
    if arch == "llama":
        out.append(f"model.n_kv_heads={int(num(row.get('n_kv_heads')) or num(row['n_heads']))}")
    if str(row["model"]) in HEAD_DIM_OF_MODEL:
        width, where = HEAD_DIM_OF_MODEL[str(row["model"])]
        out.append(f"model.head_dim={width}")
        assumed.append(f"head_dim {width}, not d/H = {int(num(row['d_model']) // num(row['n_heads']))}: {where}")
    return out


TORCHTITAN_PIPELINE = (
    "torchtitan_h100_2024",
    "torchtitan @9dec370 (docs/performance.md @d4c86e37's tested commit), no microbatches or split points set: "
    "torchtitan/parallelisms/pipelining_utils.py build_pipeline_schedule takes n_microbatches = "
    "pipeline_parallel_degree, and generate_split_points gives a looped (multi-stage) schedule 2 stages a rank",
)
"""A source whose pipelined rows run torchtitan's defaults: the local batch in pp micro-batches, and its
'Interleaved 1F1B' 2 virtual stages a rank."""


def _batch(row: dict, dp: int, pp: int, assumed: list[str]) -> list[str]:
    """The published global batch fixed and its micro-batch (Megatron's meaning): a pipeline derives
    its micro-batches per step from them (config/derived.py pipeline_batch), data parallel alone
    steps them micro at a time."""
    g = int(row["global_batch"])
    if g % dp:
        raise Unexpressible(f"global batch {g} is not divisible by dp={dp}")
    micro = num(row.get("micro_batch"))
    if micro is None and pp > 1 and row["source"] == TORCHTITAN_PIPELINE[0]:
        micro = g // dp // pp
        assumed.append(
            f"micro batch {int(micro)}: local batch {g // dp} in pp={pp} micro-batches, {TORCHTITAN_PIPELINE[1]}"
        )
    elif micro is None:
        micro = 1 if pp > 1 else g // dp
        assumed.append(f"micro batch not published: {int(micro)}")
    return [f"batch.micro={int(micro)}", f"batch.global_batch={g}"]


def map_row(row: dict) -> Mapped:
    """The row as plan overrides; Unexpressible when the tool has no way to say it."""
    source_layout = str(row["layout"])
    dp, tp, pp, cp = _degrees(row)
    layout, reshard = _layout(source_layout, cp)
    assumed: list[str] = []
    precision = _precision_and_checkpointing(row, assumed)
    out = _model(row, pp, assumed) + precision
    degrees = (("tp", tp), ("pp", pp), ("cp", cp), ("ep", int(num(row.get("ep")) or 1)))
    out += [f"parallel={layout}", *(f"parallel.{k}={v}" for k, v in degrees if f"_{k}" in layout)]
    if layout == "hsdp":  # shard within a node, replicate across nodes
        out.append(f"parallel.shard={int(num(row['gpus_per_node']))}")
    if reshard is not None:
        out.append(f"parallel.reshard_after_forward={str(reshard).lower()}")
    out += _schedule(row, pp, int(next(o for o in out if o.startswith("model.n_layers=")).split("=")[1]), assumed)
    if source_layout in SYNC_EACH_MICROSTEP and pp == 1:
        out.append("parallel.fsdp_sync_each_microstep=true")
    out += _batch(row, dp, pp, assumed)
    out += _trainer(row, assumed)
    link, nics, note = _network(row)
    if note:
        assumed.append(note)
    out += [
        "cluster=example_gpu_site",
        f"cluster.device_name={row['hardware']}",
        "cluster.peak_flops_per_device=null",
        f"cluster.gpus_per_node={int(num(row['gpus_per_node']))}",
        f"cluster.intra_link={_intra_link(row)}",
        f"cluster.inter_link={link}",
        f"cluster.nics_per_node={nics}",
    ]
    out += _device_memory(row, assumed)
    if limit := re.search(POWER_LIMIT[0], str(row["hardware"])):
        out.append(f"cluster.power_limit_w={limit.group(1)}")
        assumed.append(f"{limit.group(1)} W: {POWER_LIMIT[1]}")
    offload = str(row.get("offload") or "").strip()
    unexpressed = MEMORY_NOT_EXPRESSED.get(row["source"], "")
    return Mapped(
        overrides=out,
        gpus=int(row["gpus"]),
        layout=layout,
        assumed=assumed,
        offload=offload,
        memory_not_expressed=unexpressed,
    )


def _schedule(row: dict, pp: int, layers: int, assumed: list[str]) -> list[str]:
    """Interleaved 1F1B where the source ran it (ONE_LAYER_CHUNKS, STATED_VP); nothing (plain 1F1B) otherwise."""
    stated = re.search(STATED_VP[0], str(row.get("notes") or ""))
    if pp > 1 and row["source"] == TORCHTITAN_PIPELINE[0] and "Interleaved 1F1B" in str(row.get("notes")):
        assumed.append(f"interleaved 1F1B, 2 virtual stages a rank: {TORCHTITAN_PIPELINE[1]}")
        return ["parallel.schedule=interleaved_1f1b", "parallel.virtual_stages=2"]
    if pp == 1 or (stated is None and row["source"] not in ONE_LAYER_CHUNKS):
        return []
    v, why = (int(stated.group(1)), STATED_VP[1]) if stated else (layers // pp, ONE_LAYER_CHUNKS[row["source"]])
    if v == 1:
        return []
    assumed.append(f"interleaved 1F1B, {v} virtual stages a rank: {why}")
    return ["parallel.schedule=interleaved_1f1b", f"parallel.virtual_stages={v}"]


TP_OVERLAP_SOURCES = {
    "megatron_core_2024": "Megatron-LM README, its weak-scaling table's benchmark configuration: 'Communication "
    "optimizations: Fine-grained overlapping with DP (--overlap-grad-reduce, --overlap-param-gather), TP "
    "(--tp-comm-overlap), and PP (enabled by default)'",
}
"""Sources that state every tp run overlapped tp's collectives with its matmuls (trainer.tp_comm_overlap).
torchtitan's rows say so each (TP_OVERLAP_TECHNIQUE); nemo_perf_2407's configs say so per model
(TP_OVERLAP_MODELS)."""
TP_OVERLAP_MODELS = {
    ("nemo_perf_2407", model): "NeMo-Framework-Launcher launcher_scripts/conf/training @1a7171d7 (July 2024): "
    f"{path} sets ub_tp_comm_overlap true"
    for model, path in (
        ("GPT3-20B", "gpt3/20b.yaml"),
        ("LLAMA2-70B", "llama/llama2_70b.yaml"),
        ("LLAMA3-70B", "llama/llama3_70b.yaml"),
    )
}
"""Per-model statements; a tp row of such a source not listed ran without the overlap (at 1a7171d7 gpt3/175b.yaml
and gpt3/175b_fp8.yaml set ub_tp_comm_overlap False)."""
TP_OVERLAP_TECHNIQUE = "AsyncTP"
"""torchtitan's technique column names async TP (torch's chunked all-gather/reduce-scatter matmuls) per row."""


def _tp_overlap(row: dict, assumed: list[str]) -> list[str]:
    """trainer.tp_comm_overlap for a tp row whose source says it overlapped (the row's technique, the source, or
    its model's config); nothing otherwise."""
    if (num(row.get("tp")) or 1) <= 1:
        return []
    if TP_OVERLAP_TECHNIQUE in technique(row).split(" + "):
        why = f"the technique '{technique(row)}' names {TP_OVERLAP_TECHNIQUE}"
    else:
        why = TP_OVERLAP_SOURCES.get(row["source"]) or TP_OVERLAP_MODELS.get((row["source"], row["model"]))
    if why is None:
        return []
    assumed.append(f"tp collectives overlapped: {why}")
    return ["trainer.tp_comm_overlap=true"]


def _trainer(row: dict, assumed: list[str]) -> list[str]:
    """What the source's trainer keeps in memory unlike the built-in one, as the source's config says."""
    out: list[str] = []
    if row["source"] in TRAINERS:
        overrides, why = TRAINERS[row["source"]]
        out += overrides
        assumed.append(why)
    if row["source"] == "pytorch_fsdp_blog_2024" and row.get("activation_checkpointing") == "selective":
        out.append(f"trainer.checkpoint_every_nth_block={FMS_SELECTIVE[0]}")
        assumed.append(FMS_SELECTIVE[1])
    if (why := FUSED_RMSNORM.get((row["source"], row["model"]))) is not None:
        out.append("trainer.norm_16bit=true")
        assumed.append(why)
    return out + _tp_overlap(row, assumed)


def _device_memory(row: dict, assumed: list[str]) -> list[str]:
    for pattern, gib, why in DEVICE_MEMORY:
        if re.search(pattern, str(row["hardware"])):
            assumed.append(why)
            return [f"cluster.device_memory_gb={gib}"]
    return []
