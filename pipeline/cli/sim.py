"""`seer sim <what>`: the rollout simulator: validate it, run Seer's scale, or split a gap."""

from __future__ import annotations

import argparse


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> argparse.ArgumentParser:
    sim = sub.add_parser(
        "sim",
        help="the rollout simulator: validate it, run Seer's scale, or split context-aware's "
        "gap to the oracle into its causes",
    )
    sim.add_argument("what", choices=("validate", "seer", "gap", "agentic"))
    sim.add_argument("--json", help="write the result as JSON here (a PNG beside it)")
    sim.add_argument("--quick", action="store_true", help="validate: the small workload")
    sim.add_argument("--seeds", type=int, default=3, help="validate: live seeds (>= 3)")
    sim.add_argument(
        "--table", help="validate: a `seer profile` table (default: this machine's cached one)"
    )
    sim.add_argument(
        "--reprofile", action="store_true", help="validate: measure the cached table again"
    )
    sim.add_argument("--no-drafts", action="store_true", help="validate: skip +drafts runs")
    sim.add_argument(
        "--fixed-table",
        action="store_true",
        help="validate: replay on the cached table only (default: a table measured in passes "
        "between the live blocks, the cached one compared)",
    )
    sim.add_argument("--traces", help="validate: replay the traces in this folder (no live runs)")
    sim.add_argument(
        "--temperature",
        type=float,
        help="validate: the live samples' temperature (default 0.03: the random bench model's "
        "siblings repeat each other, so grouped drafts find text; at 1.0 they share none)",
    )
    sim.add_argument("--workload", action="append", help="seer: moonlight, qwen2-vl-72b, kimi-k2")
    sim.add_argument(
        "--scale", type=float, default=1.0, help="seer, agentic: fraction of the groups"
    )
    sim.add_argument(
        "--chunk-size", type=int, help="seer, agentic: tokens per chunk (default 4096)"
    )
    sim.add_argument("--instances", type=int, default=32, help="seer, agentic: generator instances")
    return sim


def run(args: argparse.Namespace) -> int:
    """Run the simulator command named by `what` (validate, seer or gap)."""
    if args.what == "validate":
        from pipeline.sim import validate

        validate.run(
            args.json,
            quick=args.quick,
            seeds=args.seeds,
            table=args.table,
            drafts=not args.no_drafts,
            traces=args.traces,
            reprofile=args.reprofile,
            interleave=not args.fixed_table,
            temperature=validate.TEMPERATURE if args.temperature is None else args.temperature,
        )
    elif args.what == "agentic":
        from pipeline.sim import agentic

        agentic.run(
            args.json,
            scale=args.scale,
            chunk_size=args.chunk_size or 4096,
            num_instances=args.instances,
        )
    elif args.what == "gap":
        from pipeline.sim import gap

        gap.run(
            args.json,
            workloads=tuple(args.workload) if args.workload else ("qwen2-vl-72b", "kimi-k2"),
            scale=args.scale,
            chunk_size=args.chunk_size or 4096,
            num_instances=args.instances,
        )
    else:
        from pipeline.sim import seer

        workloads = tuple(args.workload) if args.workload else tuple(seer.SEER_WORKLOADS)
        seer.run(
            args.json,
            workloads=workloads,
            scale=args.scale,
            chunk_size=args.chunk_size or 4096,
            num_instances=args.instances,
        )
    return 0
