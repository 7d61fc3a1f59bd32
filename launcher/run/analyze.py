"""`launcher analyze TABLE`: judge a scaling table measured anywhere (launcher/results/foreign.py
says what the table needs) and print it with the recommendation."""

from __future__ import annotations

import argparse

from launcher.config.errors import ConfigError
from launcher.report.terminal import print_table
from launcher.results.cost import Pricing
from launcher.results.foreign import analyze, check_policy, read_table
from launcher.results.policy import Policy


def main(args: argparse.Namespace) -> int:
    """`launcher analyze TABLE`: judge a scaling table measured anywhere."""
    policy = Policy(
        name=args.policy,
        threshold=args.threshold,
        budget_device_hours=args.budget_gpu_hours,
        budget_usd=args.budget_usd,
    )
    pricing = Pricing(
        usd_per_device_hour=args.usd_per_gpu_hour, spot_discount=args.spot_discount, token_budget=args.token_budget
    )
    for flag, value in (
        ("--usd-per-gpu-hour", args.usd_per_gpu_hour),
        ("--token-budget", args.token_budget),
        ("--budget-gpu-hours", args.budget_gpu_hours),
        ("--budget-usd", args.budget_usd),
    ):
        if value is not None and not value > 0:
            raise ConfigError(f"{flag} {value:g} must be a positive number")
    check_policy(policy, pricing)
    result = analyze(read_table(args.table), policy, pricing, scaling=args.scaling)
    print_table(
        result.table.dropna(axis=1, how="all"),
        result.recommendation,
        title=f"{args.table} ({args.policy})",
        unit=result.unit,
        everything=args.table,
    )
    return 0 if result.recommendation.world_size is not None else 1
