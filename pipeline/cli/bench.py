"""`seer bench <name>`: the benchmarks that compare variants side by side (pipeline/bench/)."""

from __future__ import annotations

import argparse
import importlib

BENCHES = {
    "transport": "pipeline.bench.transport",
    "engine": "pipeline.bench.engine",
    "rollout": "pipeline.bench.rollout",
    "drafts": "pipeline.bench.drafts",
    "scheduler": "pipeline.bench.scheduler",
    "serve": "pipeline.bench.serve",
    "faults": "pipeline.bench.faults",
    "dispatch": "pipeline.bench.dispatch",
    "layouts": "pipeline.bench.layouts",
    "eviction": "pipeline.bench.eviction",
    "agentic": "pipeline.bench.agentic",
}


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> argparse.ArgumentParser:
    bench = sub.add_parser("bench", help="benchmarks that compare variants side by side")
    bench.add_argument("name", choices=sorted(BENCHES))
    bench.add_argument("--json", help="write the result as JSON here")
    bench.add_argument("--quick", action="store_true", help="smaller sizes (smoke test)")
    bench.add_argument("--trace", help="rollout: replay this recorded trace's workload")
    bench.add_argument(
        "--chunk-size",
        type=int,
        default=128,
        help="rollout, eviction, agentic: tokens per chunk",
    )
    bench.add_argument(
        "--repeats",
        type=int,
        help="rollout, drafts, scheduler, serve, engine, agentic: runs per variant (median); "
        "eviction: seeds",
    )
    bench.add_argument(
        "--model",
        help="drafts: a saved model to roll out (default: warm start); "
        "engine: a Hugging Face model folder (llama, qwen2)",
    )
    bench.add_argument(
        "--shape",
        default="small",
        choices=("small", "qwen2.5-0.5b"),
        help="engine: the random model's shape (small: 3.3M parameters; qwen2.5-0.5b: 494M)",
    )
    bench.add_argument(
        "--backend",
        choices=("builtin", "sglang"),
        default="builtin",
        help="rollout: sglang = the four policies over seer serve (HTTP) beside the builtin; "
        "layouts: sglang = (servers, --tp-size) layouts of launched seer serve servers",
    )
    bench.add_argument("--profile", help="scheduler: write a cProfile of the scheduler here")
    bench.add_argument("--faults", help="faults: comma-separated subset (default: all)")
    return bench


def run(args: argparse.Namespace) -> int:
    """Run the named benchmark with the flags that apply to it."""
    module = importlib.import_module(BENCHES[args.name])
    if args.name == "rollout" and args.backend == "sglang":
        from pipeline.bench import sglang_rollout

        sglang_rollout.run(
            args.json, quick=args.quick, chunk_size=args.chunk_size, repeats=args.repeats
        )
    elif args.name == "rollout":
        module.run(
            args.json,
            quick=args.quick,
            trace=args.trace,
            chunk_size=args.chunk_size,
            repeats=args.repeats,
        )
    elif args.name == "scheduler":
        module.run(args.json, quick=args.quick, repeats=args.repeats, profile=args.profile)
    elif args.name == "serve":
        module.run(args.json, quick=args.quick, repeats=args.repeats)
    elif args.name == "layouts":
        module.run(args.json, quick=args.quick, backend=args.backend)
    elif args.name == "faults":
        faults = tuple(args.faults.split(",")) if args.faults else None
        module.run(args.json, quick=args.quick, faults=faults)
    elif args.name == "eviction":
        module.run(args.json, quick=args.quick, repeats=args.repeats, chunk_size=args.chunk_size)
    elif args.name == "engine":
        module.run(
            args.json,
            quick=args.quick,
            shape=args.shape,
            model_dir=args.model,
            repeats=args.repeats,
        )
    elif args.name == "agentic":
        module.run(args.json, quick=args.quick, repeats=args.repeats, chunk_size=args.chunk_size)
    elif args.name == "drafts":
        module.run(args.json, quick=args.quick, repeats=args.repeats, model=args.model)
    else:
        module.run(args.json, quick=args.quick)
    return 0
