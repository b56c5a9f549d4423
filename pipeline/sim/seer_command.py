"""`seer sim seer`'s command line: Seer's ablation (`pipeline/sim/seer.py`) or, with
`--epochs`, the same workloads over epochs with history-aware policies
(`pipeline/sim/epochs.py`)."""

from __future__ import annotations

import argparse

from pipeline.sim import epochs, seer
from pipeline.sim.workload import EpochModel


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """`seer sim seer`'s own flags (beside --json)."""
    parser.add_argument(
        "--quick",
        action="store_true",
        help=f"a smoke test: moonlight (unless --workload) at --scale {seer.QUICK_SCALE}",
    )
    parser.add_argument(
        "--workload", action="append", help=f"repeat for several: {', '.join(seer.SEER_WORKLOADS)}"
    )
    parser.add_argument("--scale", type=float, help="fraction of the groups (default 1)")
    parser.add_argument("--chunk-size", type=int, default=4096, help="tokens per chunk")
    parser.add_argument("--instances", type=int, default=32, help="generator instances")
    parser.add_argument(
        "--epochs",
        type=int,
        help="epochs of recurring prompts, with history-aware policies (default workloads: "
        "qwen2-vl-72b, kimi-k2)",
    )
    parser.add_argument(
        "--policy",
        action="append",
        help="--epochs: run only these policies (repeat; also the study variants "
        "ca_prior_strict, ca_band, ca_prior_until_finished, ca_extrapolated, "
        "ca_group_max_known)",
    )
    parser.add_argument(
        "--iterations-per-epoch", type=int, default=4, help="--epochs: P/B iterations"
    )
    parser.add_argument(
        "--drift", type=float, default=0.005, help="--epochs: length growth per iteration"
    )
    parser.add_argument("--seed", type=int, default=0, help="--epochs: the workload's seed")
    parser.add_argument(
        "--long-band",
        type=float,
        help="--epochs: context-aware's long band for the policies that use it "
        "(context_aware_prior, seer_history, ca_band; default: the live scheduler's)",
    )


def run_args(args: argparse.Namespace) -> None:
    """`seer sim seer` from its parsed flags."""
    scale = args.scale if args.scale is not None else (seer.QUICK_SCALE if args.quick else 1.0)
    if args.epochs is None and (
        args.policy
        or args.iterations_per_epoch != 4
        or args.drift != 0.005
        or args.seed != 0
        or args.long_band is not None
    ):
        raise ValueError(
            "--policy, --iterations-per-epoch, --drift, --seed and --long-band need --epochs"
        )
    if args.epochs is not None:
        epochs.run(
            args.json,
            epochs=args.epochs,
            workloads=tuple(args.workload) if args.workload else ("qwen2-vl-72b", "kimi-k2"),
            policies=tuple(args.policy) if args.policy else tuple(epochs.EPOCH_POLICIES),
            model=EpochModel(iterations_per_epoch=args.iterations_per_epoch, drift=args.drift),
            scale=scale,
            chunk_size=args.chunk_size,
            num_instances=args.instances,
            seed=args.seed,
            long_band=args.long_band,
        )
        return
    default = ("moonlight",) if args.quick else tuple(seer.SEER_WORKLOADS)
    seer.run(
        args.json,
        workloads=tuple(args.workload) if args.workload else default,
        scale=scale,
        chunk_size=args.chunk_size,
        num_instances=args.instances,
    )
