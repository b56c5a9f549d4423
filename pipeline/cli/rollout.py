"""`seer rollout`: one rollout of the benchmark workload, Seer's scheduler beside a baseline."""

from __future__ import annotations

import argparse

from actors.scheduler.policy import POLICY_NAMES


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> argparse.ArgumentParser:
    roll = sub.add_parser("rollout", help="one benchmark rollout: Seer scheduler vs baseline")
    roll.add_argument(
        "--policy",
        default="baseline",
        choices=POLICY_NAMES,
        help="compare context_aware with this (default: baseline)",
    )
    roll.add_argument("--chunk-size", type=int, default=128)
    roll.add_argument("--out", help="run folder (default: runs/rollout-<time>)")
    return roll


def run(args: argparse.Namespace) -> int:
    """One rollout of the benchmark workload under the Seer scheduler and the baseline."""
    import time

    from pipeline.bench.rollout import run as run_rollout
    from pipeline.logs import configure_logging

    configure_logging("warning")
    out = args.out or f"runs/rollout-{time.strftime('%Y%m%d-%H%M%S')}"
    policies = (
        (args.policy, "context_aware") if args.policy != "context_aware" else ("context_aware",)
    )
    run_rollout(None, chunk_size=args.chunk_size, out_dir=out, repeats=1, policies=policies)
    return 0
