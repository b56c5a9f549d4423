"""`seer profile`: measure the built-in engine into the simulator's cost table."""

from __future__ import annotations

import argparse


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> argparse.ArgumentParser:
    prof = sub.add_parser("profile", help="measure the built-in engine into a cost table")
    prof.add_argument("--json", default="runs/costmodel_cpu.json", help="write the table here")
    prof.add_argument("--quick", action="store_true", help="a small grid (under a minute)")
    return prof


def run(args: argparse.Namespace) -> int:
    """Measure the cost table and write it to --json."""
    from pipeline.sim import profile

    profile.run(args.json, quick=args.quick)
    return 0
