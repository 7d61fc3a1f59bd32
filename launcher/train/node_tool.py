"""How a node-side tool other than the trainer starts (the link probe, the site profile): its two
arguments, the trial's config read, this rank's environment and device. torch and the standard library
only, as everything a node runs."""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import torch

from launcher.config.schema import LauncherConfig
from launcher.train import dist as tdist
from launcher.train.env import RankEnv, process_env
from launcher.trials.folder import from_document, read_document


@dataclass(kw_only=True, frozen=True)
class NodeStart:
    out: Path
    """Where rank 0 writes the tool's figures."""
    cfg: LauncherConfig
    """The trial's config (trial.json)."""
    renv: RankEnv
    """This rank's place in the job."""
    device: torch.device
    """The device this rank measures on."""


def start(prog: str, doc: str | None, out_help: str, argv: Sequence[str] | None) -> NodeStart | None:
    """Parse `--trial` and `--out`, read the trial, pin threads and pick the device; None (after one line on
    stderr) when trial.json cannot be read: the tool then exits 2."""
    parser = argparse.ArgumentParser(prog=prog, description=doc)
    parser.add_argument("--trial", required=True, type=Path, help="trial.json written by the launcher")
    parser.add_argument("--out", required=True, type=Path, help=out_help)
    args = parser.parse_args(argv)
    spec = read_document(args.trial)
    if not spec.ok:
        print(f"{prog.removeprefix('python -m ')}: {spec.reason}", file=sys.stderr, flush=True)
        return None
    _, cfg = from_document(spec.doc)
    renv = process_env(os.environ)
    torch.set_num_threads(cfg.cluster.threads_per_rank)
    return NodeStart(out=args.out, cfg=cfg, renv=renv, device=tdist.pick_device(cfg.cluster.device, renv.local_rank))
