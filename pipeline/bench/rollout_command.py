"""`seer bench rollout`: its flags, and which bench they run: the built-in engine's
(`rollout.py`) or, with `--backend sglang`, the same policies over `seer serve` servers
(`sglang_rollout.py`, which builds on `rollout.py`)."""

from __future__ import annotations

import argparse

from pipeline.bench import rollout, sglang_rollout


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """`seer bench rollout`'s own flags (beside --json and --quick)."""
    parser.add_argument("--trace", help="replay this recorded trace's workload (builtin)")
    parser.add_argument("--chunk-size", type=int, default=128, help="tokens per chunk")
    parser.add_argument(
        "--backend",
        choices=("builtin", "sglang"),
        default="builtin",
        help="sglang: the four policies over seer serve (HTTP) beside the builtin",
    )
    parser.add_argument("--repeats", type=int, help="runs per variant (the median is reported)")


def run_args(args: argparse.Namespace) -> None:
    """`seer bench rollout` from its parsed flags."""
    if args.backend == "sglang":
        if args.trace:
            raise ValueError("seer bench rollout --backend sglang: --trace is for the builtin")
        sglang_rollout.run(
            args.json, quick=args.quick, chunk_size=args.chunk_size, repeats=args.repeats
        )
        return
    rollout.run(
        args.json,
        quick=args.quick,
        trace=args.trace,
        chunk_size=args.chunk_size,
        repeats=args.repeats,
    )
