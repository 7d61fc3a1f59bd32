"""`launcher plan`: predicted throughput, efficiency, MFU, $ and time per size, running nothing;
`--output` writes the table (CSV or parquet) and saves the plan beside it (saved_plan.py) for `launcher
run --from`. The predictions themselves are in plan_table.py.
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from pathlib import Path

from launcher.config.cluster_traits import cluster_traits
from launcher.config.compose import compose_config
from launcher.config.derived import ranks_per_node
from launcher.config.errors import ConfigError
from launcher.config.expand import expand
from launcher.config.plain import current_spelling
from launcher.config.schema import LauncherConfig
from launcher.perf.notes import efficiency_lines, tight_line
from launcher.perf.plan_search import Verify, memory_line, search_main
from launcher.perf.plan_table import (
    Forecast,
    check_output,
    fp8_mfu_ratio,
    from_presets_forecast,
    from_sweep_forecast,
    joined,
    write_output,
)
from launcher.perf.saved_plan import check_saved_path, save_table_plan, saved_line
from launcher.perf.shapes import planned_device
from launcher.perf.terms import dominant_lines, fp8_line, layout_lines, moe_line
from launcher.report.terminal import PLAN_PRIORITY, print_table
from launcher.trials.folder import read_sweep_spec

__all__ = ["Forecast", "from_presets_forecast", "from_sweep_forecast", "main", "parse_gpus", "sweep_overrides"]

MAX_SIZES = 64


def parse_gpus(spec: str) -> list[int]:
    """`8..16384` (doubling), `8,16,24` (a list) or `64`."""
    try:
        if ".." in spec:
            lo_s, hi_s = spec.split("..", 1)
            lo, hi = int(lo_s), int(hi_s)
            if lo < 1 or hi < lo:
                raise ValueError
            sizes = []
            n = lo
            while n <= hi:
                sizes.append(n)
                n *= 2
        else:
            sizes = sorted({int(x) for x in spec.split(",")})
            if not sizes or sizes[0] < 1:
                raise ValueError
    except ValueError:
        raise ConfigError(
            f"--gpus {spec!r} is not a size range; write e.g. --gpus 8..16384 (doubling) or --gpus 8,16,24"
        ) from None
    if len(sizes) > MAX_SIZES:
        raise ConfigError(
            f"--gpus {spec!r} names {len(sizes)} sizes; at most {MAX_SIZES}, e.g. a doubling range 8..16384"
        )
    return sizes


def device_overrides(overrides: Sequence[str]) -> list[str]:
    """`cluster.device_name` on the command line names the device the plan prices, so its peak comes from
    the peak table (and its fitted MFU applies) unless `cluster.peak_flops_per_device` is given there too:
    a recipe's own peak (example_gpu_site's A100 figure) is its own device's, not the one named."""
    keys = {o.split("=", 1)[0].lstrip("+~") for o in overrides}
    if "cluster.device_name" in keys and "cluster.peak_flops_per_device" not in keys:
        return [*overrides, "cluster.peak_flops_per_device=null"]
    return list(overrides)


def check_nodes(cfg: LauncherConfig, sizes: Sequence[int], gpus: str) -> None:
    """A GPU planned on the local cluster (one device per node) would be planned as that many one-GPU
    nodes, every collective on the network: refused in one line naming `cluster=`."""
    c = cfg.cluster
    gpu = planned_device(cfg) == "cuda" and (c.device_name or "cpu").lower() != "cpu"
    if cluster_traits(c).ranks_here and gpu and ranks_per_node(c) == 1 and max(sizes) > 1:
        n = max(sizes)
        raise ConfigError(
            f"launcher plan --gpus {gpus} of cluster.device_name={c.device_name} plans {n} GPUs as {n} one-GPU "
            f"nodes (cluster={c.name}: one device per node); name your site's cluster, e.g. cluster=example_gpu_site, "
            "or set cluster.gpus_per_node"
        )


def sweep_overrides(sweep_dir: Path, user: Sequence[str]) -> list[str]:
    """The measured sweep's own overrides (its first combination) with the user's pricing and
    policy overrides after them; anything else would not be the recipe that was measured."""
    for o in user:
        key = o.split("=", 1)[0].lstrip("+~")
        if not (key.startswith("sweep.") or key in ("cluster.usd_per_device_hour", "cluster.spot_discount")):
            raise ConfigError(
                f"--from plans the measured recipe on the measured hardware, so {o!r} cannot apply; only sweep.* "
                "(policy, threshold, budgets) and cluster.usd_per_device_hour / cluster.spot_discount can"
            )
    spec = read_sweep_spec(sweep_dir)
    if spec.missing:
        raise ConfigError(f"--from {str(sweep_dir)!r} is not a sweep folder (no sweep.json); pass results/<sweep-id>")
    if not spec.ok:
        raise ConfigError(
            f"--from {str(sweep_dir)!r}: {spec.reason}; its overrides cannot be read, so nothing can be planned"
        )
    return [*map(current_spelling, expand(spec.doc["overrides"])[0].overrides), *user]


def sweep_recipes(sweep_dir: Path, given: str | None) -> str | None:
    """--recipes, else the user's recipe folder the measured sweep was composed from (sweep.json
    `recipes`; a sweep of a recipe of yours, such as a `job=command` one, plans without repeating it)."""
    stored = read_sweep_spec(sweep_dir).doc.get("recipes") if not given else None
    if stored and not Path(stored).is_dir():
        raise ConfigError(
            f"--from {str(sweep_dir)!r} was composed from the recipe folder {stored!r}, which is gone; "
            "pass --recipes DIR with the recipes it used"
        )
    return given or stored


def main(args: argparse.Namespace, *, verify: Verify | None = None) -> int:
    """`launcher plan`: predict sizes from presets or a measured sweep; nothing runs. Comma
    overrides plan each combination into one table with a variant column, as a sweep does.
    `verify`: what runs --verify's candidates (run/verify.py, handed down by the CLI)."""
    sizes = parse_gpus(args.gpus)
    k = getattr(args, "verify", None)
    if k is not None and not getattr(args, "search", False):
        raise ConfigError(f"--verify {k} runs the top candidates of a search: add --search")
    if k is not None and k < 1:
        raise ConfigError(f"--verify {k}: give the number of top candidates to run, 1 or more")
    check_output(args.output)
    check_saved_path(args.output)
    user = sweep_overrides(Path(args.from_sweep), args.overrides) if args.from_sweep else list(args.overrides)
    if args.from_sweep:
        args.recipes = sweep_recipes(Path(args.from_sweep), args.recipes)
    # A measured sweep plans with the overrides it ran with, its peak as it was.
    variants = [(v.label, v.overrides if args.from_sweep else device_overrides(v.overrides)) for v in expand(user)]
    if getattr(args, "search", False):
        if len(variants) > 1:
            raise ConfigError("launcher plan --search searches the layouts itself: give one recipe, no comma values")
        over = variants[0][1]
        cfg = compose_config(over, args.recipes)
        check_nodes(cfg, sizes, args.gpus)
        return search_main(cfg, sizes, args, overrides=over, verify=verify)
    configs = [(label, compose_config(over, args.recipes)) for label, over in variants]
    if not args.from_sweep:  # a measured sweep's nodes are the ones it ran on
        for _, c in configs:
            check_nodes(c, sizes, args.gpus)
    planned = [(label, _forecast(args, c, sizes)) for label, c in configs]
    cfg = configs[0][1]
    if len(planned) == 1:
        result, label = planned[0][1][1], cfg.parallel.layout
    else:
        result, label = joined(planned, cfg), ", ".join(v for v, _ in planned)
    footer = [f"model{f' ({v})' if len(planned) > 1 else ''}: {fc.source}" for v, (_, fc) in planned]
    footer = list(dict.fromkeys(footer)) if len({fc.source for _, (_, fc) in planned}) > 1 else footer[:1]
    footer += list(dict.fromkeys(f"{v}: {n}" if len(planned) > 1 else n for v, (_, fc) in planned for n in fc.notes))
    for v, (c, fc) in planned:
        lines = dominant_lines(fc.table, c.parallel.layout, c.parallel.reshard_after_forward)
        footer += [f"{v}: {line}" if len(planned) > 1 else line for line in lines]
    ratio = None if args.from_sweep else fp8_mfu_ratio(cfg, args.assume_mfu)  # a sweep measured its own MFU
    footer += [line for line in [moe_line(cfg), fp8_line(ratio)] if line]
    footer += layout_lines(cfg)
    footer += efficiency_lines(result.table)
    footer += [line for line in [tight_line(result.table, cfg)] if line]
    footer.append(memory_line(cfg))
    print_table(
        result.table.dropna(axis=1, how="all"),
        result.recommendation,
        unit="GPU",
        everything=None,
        priority=PLAN_PRIORITY,
        title=f"plan: {cfg.model.name}, {label}, {cfg.cluster.name} (predicted; nothing ran)",
        footer="\n".join(footer),
    )
    if args.output:
        write_output(result.table, args.output)
        saved = save_table_plan(args.output, recipes=args.recipes, variants=variants, configs=configs, forecast=result)
        print(f"table written to {args.output}")
        print(saved_line(saved, result.recommendation))
    return 0 if result.recommendation.world_size is not None else 1


def _forecast(args: argparse.Namespace, cfg: LauncherConfig, sizes: list[int]) -> tuple[LauncherConfig, Forecast]:
    if args.from_sweep:
        return cfg, from_sweep_forecast(Path(args.from_sweep), cfg, sizes)
    return cfg, from_presets_forecast(cfg, sizes, assume_mfu=args.assume_mfu)
