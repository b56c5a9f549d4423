"""`seer sim <what>`: the rollout simulator: validate it, run Seer's scale, or split a gap."""

from __future__ import annotations

import argparse


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> argparse.ArgumentParser:
    sim = sub.add_parser(
        "sim",
        help="the rollout simulator: validate it, run Seer's scale, or split context-aware's "
        "gap to the oracle into its causes",
    )
    sim.add_argument("what", choices=("validate", "seer", "gap"))
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
    sim.add_argument("--scale", type=float, default=1.0, help="seer: fraction of the groups")
    sim.add_argument("--chunk-size", type=int, help="seer: tokens per chunk (default 4096)")
    sim.add_argument("--instances", type=int, default=32, help="seer: generator instances")
    sim.add_argument(
        "--epochs",
        type=int,
        help="seer: epochs of recurring prompts, with history-aware policies (default "
        "workloads: qwen2-vl-72b, kimi-k2)",
    )
    sim.add_argument(
        "--policy",
        action="append",
        help="seer --epochs: run only these policies (repeat; also the study variants "
        "ca_prior_until_finished, ca_extrapolated)",
    )
    sim.add_argument(
        "--iterations-per-epoch", type=int, default=4, help="seer --epochs: P/B iterations"
    )
    sim.add_argument(
        "--drift", type=float, default=0.005, help="seer --epochs: length growth per iteration"
    )
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
    elif args.what == "gap":
        from pipeline.sim import gap

        gap.run(
            args.json,
            workloads=tuple(args.workload) if args.workload else ("qwen2-vl-72b", "kimi-k2"),
            scale=args.scale,
            chunk_size=args.chunk_size or 4096,
            num_instances=args.instances,
        )
    elif args.epochs is not None:
        from pipeline.sim import epochs
        from pipeline.sim.workload import EpochModel

        epochs.run(
            args.json,
            epochs=args.epochs,
            workloads=tuple(args.workload) if args.workload else ("qwen2-vl-72b", "kimi-k2"),
            policies=tuple(args.policy) if args.policy else tuple(epochs.EPOCH_POLICIES),
            model=EpochModel(iterations_per_epoch=args.iterations_per_epoch, drift=args.drift),
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
