"""The `seer` command line: run the main job, start one actor, benchmarks, keys."""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from pipeline.serve import DefaultModel

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
}


def _cmd_run(args: argparse.Namespace) -> int:
    """The main job: synchronous GRPO on the embedded default task, every Seer mechanism
    that has landed switched on, live progress, and a run folder with the report."""
    import dataclasses
    import time
    import tomllib

    import anyio
    from rich.console import Console

    from pipeline.config import build_options
    from pipeline.logs import configure_logging
    from pipeline.records.plot import plot_timeline
    from pipeline.records.trace import load_trace
    from pipeline.rl.config import RunConfig
    from pipeline.rl.loop import train
    from pipeline.rl.report import LiveReport, plot_rewards, summary_table

    configure_logging("warning")
    console = Console(width=120)
    cfg = (
        build_options(RunConfig, tomllib.loads(Path(args.config).read_text()), args.config)
        if args.config
        else RunConfig()
    )
    changes = {
        k: v
        for k, v in (
            ("policy", args.policy),
            ("iterations", args.iterations),
            ("resume", args.resume),
            ("warm_start_steps", args.warm_start_steps),
            ("trainer_ranks", args.trainer_ranks),
            ("dispatch", args.dispatch),
        )
        if v is not None
    }
    if args.backend or args.sglang_url or args.sglang_command:
        from pipeline.launch.backend import use_backend

        gen = use_backend(
            cfg.generator, args.backend, urls=args.sglang_url or (), command=args.sglang_command
        )
        changes["generator"] = gen
        if gen.sglang.urls and gen.backend == "sglang":
            changes["num_generators"] = len(gen.sglang.urls)
    out = args.out or f"runs/run-{time.strftime('%Y%m%d-%H%M%S')}"
    cfg = dataclasses.replace(cfg, out_dir=out, **changes)
    gen = cfg.generator
    if args.sglang_router and not (gen.backend == "sglang" and gen.sglang.urls):
        raise ValueError("--sglang-router needs SGLang servers given by URL (--sglang-url)")
    console.print(
        f"[bold]seer run[/]: {cfg.task}, {cfg.iterations} iterations x "
        f"{cfg.prompts_per_iteration} prompts x {cfg.group_size} samples, policy "
        f"{cfg.policy or 'context_aware'}, {cfg.num_generators} generators; run folder {out}"
    )
    if args.sglang_router:
        rows = anyio.run(_train_routed, cfg, LiveReport(console))
    else:
        rows = anyio.run(train, cfg, LiveReport(console))
    folder = Path(out)
    plot_rewards(rows, folder / "reward.png")
    trace = folder / "last-rollout" / "trace.json"
    if trace.exists():
        record = load_trace(trace)
        plot_timeline({record.policy: record}, folder / "rollout-timeline.png")
    console.print(summary_table(rows, f"{len(rows)} iterations ({cfg.policy or 'context_aware'})"))
    last = rows[-1] if rows else {}
    if "eval_reward_before" in last:
        console.print(
            f"held-out reward (fixed prompts and seeds): {last['eval_reward_before']:.3f}"
            f" before training -> {last['eval_reward']:.3f} after {len(rows)} iterations"
            + (
                f" (success {last['eval_success_before']:.3f} -> {last['eval_success']:.3f})"
                if last.get("eval_success") != last["eval_reward"]
                else ""
            )
        )
    console.print(f"wrote {folder}/metrics.jsonl, reward.png, rollout-timeline.png")
    return 0


def _cmd_rollout(args: argparse.Namespace) -> int:
    """One rollout of the benchmark workload under the Seer scheduler and the baseline."""
    import time

    from pipeline.bench.rollout import run
    from pipeline.logs import configure_logging

    configure_logging("warning")
    out = args.out or f"runs/rollout-{time.strftime('%Y%m%d-%H%M%S')}"
    policies = (
        (args.policy, "context_aware") if args.policy != "context_aware" else ("context_aware",)
    )
    run(None, chunk_size=args.chunk_size, out_dir=out, repeats=1, policies=policies)
    return 0


def _cmd_actor(args: argparse.Namespace) -> int:
    import os

    import anyio

    from pipeline.config import load_config
    from pipeline.launch.registry import build_actor, zmq_transport
    from pipeline.logs import configure_logging

    config = load_config(args.config)
    configure_logging(config.log_level)
    if args.role is None:  # static launch: which actor this is comes from the rank
        from pipeline.launch.static import actor_for_rank, rank_from_env

        rank = rank_from_env(os.environ)
        if rank is None:
            raise ValueError("give --role (and --index), or set SEER_RANK / SLURM_PROCID / RANK")
        args.role, args.index = actor_for_rank(config, rank)
    if args.registry:
        from pipeline.launch.static import run_registered_actor

        run_registered_actor(config, args.role, args.index, args.registry, host=args.host)
        return 0
    transport = zmq_transport(config)
    actor = build_actor(config, args.role, args.index, transport, in_process=False)
    # SEER_PROFILE="<role>:<path>": cProfile this actor's process (`seer bench scheduler`)
    role, _, path = os.environ.get("SEER_PROFILE", "").partition(":")
    if role != args.role or not path:
        anyio.run(actor.run)
        # a clean stop is complete (on_stop ran, ActorStopped sent, sockets closed): exit
        # now rather than wait on interpreter teardown (seen taking over 10 s, until the
        # launcher's SIGTERM, after every clean stop)
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(0)
    import cProfile

    with cProfile.Profile() as profiler:
        anyio.run(actor.run)
    profiler.dump_stats(path)
    return 0


def _cmd_bench(args: argparse.Namespace) -> int:
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
    elif args.name == "drafts":
        module.run(args.json, quick=args.quick, repeats=args.repeats, model=args.model)
    else:
        module.run(args.json, quick=args.quick)
    return 0


def serve_default_model(cache_dir: str = "runs/cache") -> DefaultModel:
    """What `seer serve` serves without --model: the default task's model as `seer run`
    builds it (its cached warm start in `cache_dir`, else a random model of that shape),
    and that task's end-of-sequence token."""
    from pipeline.rl.config import RunConfig, generator_options
    from pipeline.serve import DefaultModel
    from pipeline.tasks import get_task
    from pipeline.tasks.warmstart import warm_start_path

    cfg = RunConfig(cache_dir=cache_dir)
    task = get_task(cfg.task)
    config = generator_options(cfg, task, "").model.config()
    cached = warm_start_path(
        task, config, cache_dir=cfg.cache_dir, steps=cfg.warm_start_steps, seed=cfg.seed
    )
    return DefaultModel(
        config=config, warm_start=str(cached), seed=cfg.seed, eos_token_id=task.eos_token_id
    )


def _cmd_serve(args: argparse.Namespace) -> int:
    from pipeline.logs import configure_logging
    from pipeline.serve import ServeOptions, serve

    configure_logging("warning")
    threads = {n for n in (args.num_threads, args.tp_size) if n is not None}
    if len(threads) > 1:
        raise SystemExit("seer serve: --tp-size and --num-threads disagree (they are one knob)")
    if any(n < 1 for n in threads):
        raise SystemExit("seer serve: --tp-size / --num-threads must be >= 1")
    serve(
        ServeOptions(
            model_path=args.model or "",
            host=args.host,
            port=args.port,
            max_batch=args.max_batch,
            kv_budget_tokens=args.kv_budget_tokens,
            max_prefill_tokens=args.max_prefill_tokens,
            num_threads=threads.pop() if threads else 1,
            eos_token_id=args.eos_token_id,
            step_delay_s=args.step_delay_ms / 1000,
            api_key=args.api_key or "",
            incremental_streaming_output=args.incremental_streaming_output,
            default_model=serve_default_model(),
        )
    )
    return 0


async def _train_routed(cfg: Any, report: Any) -> Any:
    """`train` with SGLang's router in front of the run's servers (its log in the run folder)."""
    import dataclasses

    from pipeline.launch.backend import routed
    from pipeline.rl.loop import train

    log = Path(cfg.out_dir) / "sglang-router.log"
    async with routed(cfg.generator, log) as gen:
        return await train(dataclasses.replace(cfg, generator=gen), report)


def _cmd_profile(args: argparse.Namespace) -> int:
    from pipeline.sim import profile

    profile.run(args.json, quick=args.quick)
    return 0


def _cmd_sim(args: argparse.Namespace) -> int:
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


def _cmd_keys(args: argparse.Namespace) -> int:
    from transport.security import generate_keys

    path = generate_keys(args.directory)
    print(f"wrote the cluster key pair to {path.parent} (copy it to every host; never commit it)")
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="seer", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    # allow_abbrev=False: the retired --warm-start-s (seconds) must not pass as an
    # abbreviation of --warm-start-steps
    run = sub.add_parser(
        "run", help="the main job: GRPO on the embedded default task", allow_abbrev=False
    )
    run.add_argument("--config", help="TOML mapping onto RunConfig (pipeline/rl/config.py)")
    run.add_argument("--policy", help="rollout scheduling: context_aware (default), baseline, ...")
    run.add_argument("--iterations", type=int)
    run.add_argument(
        "--warm-start-steps", type=int, help="supervised warm start optimiser steps (0: none)"
    )
    run.add_argument("--resume", help="a checkpoint folder of an earlier run")
    run.add_argument(
        "--trainer-ranks", type=int, help="data-parallel trainer ranks (torch.distributed)"
    )
    run.add_argument(
        "--dispatch",
        choices=("direct", "driver"),
        help="with --trainer-ranks > 1: direct (default; the scheduler scores each sample and "
        "sends it to its rank as it finishes) or driver (gather, score, then send: comparison)",
    )
    run.add_argument("--out", help="run folder (default: runs/run-<time>)")
    run.add_argument("--backend", choices=("builtin", "sglang"), help="the generators' engine")
    run.add_argument(
        "--sglang-url",
        action="append",
        help="sglang: attach a generator to this server (repeat: one per generator)",
    )
    run.add_argument(
        "--sglang-command",
        help="sglang: launch each generator's server with this command line ({python}, "
        "{model}, {host}, {port}, {tp_size} filled in; default: python -m "
        "sglang.launch_server ...)",
    )
    run.add_argument(
        "--sglang-router",
        action="store_true",
        help="sglang: start SGLang's router (seer-rl[router]) in front of the --sglang-url "
        "servers; /generate goes through it, pinned to the server our scheduler chose",
    )
    run.set_defaults(fn=_cmd_run)
    roll = sub.add_parser("rollout", help="one benchmark rollout: Seer scheduler vs baseline")
    roll.add_argument("--policy", default="baseline", help="compare context_aware with this")
    roll.add_argument("--chunk-size", type=int, default=128)
    roll.add_argument("--out", help="run folder (default: runs/rollout-<time>)")
    roll.set_defaults(fn=_cmd_rollout)
    actor = sub.add_parser("actor", help="start one actor of a topology by hand")
    actor.add_argument("--config", required=True)
    actor.add_argument("--role", help="default: the rank-th actor (SEER_RANK, SLURM_PROCID...)")
    actor.add_argument("--index", type=int, default=0)
    actor.add_argument("--registry", help="shared folder where actors publish their addresses")
    actor.add_argument("--host", default="", help="registry: address to bind (default: outward)")
    actor.set_defaults(fn=_cmd_actor)
    bench = sub.add_parser("bench", help="benchmarks that compare variants side by side")
    bench.add_argument("name", choices=sorted(BENCHES))
    bench.add_argument("--json", help="write the result as JSON here")
    bench.add_argument("--quick", action="store_true", help="smaller sizes (smoke test)")
    bench.add_argument("--trace", help="rollout: replay this recorded trace's workload")
    bench.add_argument(
        "--chunk-size", type=int, default=128, help="rollout, eviction: tokens per chunk"
    )
    bench.add_argument(
        "--repeats",
        type=int,
        help="rollout, drafts, scheduler, serve: runs per variant (median); eviction: seeds",
    )
    bench.add_argument("--model", help="drafts: a saved model to roll out (default: warm start)")
    bench.add_argument(
        "--backend",
        choices=("builtin", "sglang"),
        default="builtin",
        help="rollout: sglang = the four policies over seer serve (HTTP) beside the builtin; "
        "layouts: sglang = (servers, --tp-size) layouts of launched seer serve servers",
    )
    bench.add_argument("--profile", help="scheduler: write a cProfile of the scheduler here")
    bench.add_argument("--faults", help="faults: comma-separated subset (default: all)")
    bench.set_defaults(fn=_cmd_bench)
    srv = sub.add_parser(
        "serve",
        help="the built-in engine behind SGLang's HTTP API (/generate, weights, loads, ...)",
        description="Serve the built-in engine with SGLang 0.5.23's HTTP API. --model: a "
        "safetensors file saved by seer (warm start, checkpoint model.safetensors), a "
        "Hugging Face Llama/Qwen2 folder, or a checkpoint folder (its hf/). Without --model: the "
        "default task's cached warm start from runs/cache if `seer run` made one, else a "
        "FRESH RANDOM model of the default shape (it generates noise).",
    )
    srv.add_argument(  # --model-path and --max-running-requests: SGLang's names
        "--model", "--model-path", help="safetensors file, HF or checkpoint folder (see above)"
    )
    srv.add_argument("--host", default="127.0.0.1")
    srv.add_argument("--port", type=int, default=30000, help="0 picks a free port")
    srv.add_argument(
        "--max-batch",
        "--max-running-requests",
        type=int,
        default=64,
        help="requests decoding at once",
    )
    srv.add_argument("--kv-budget-tokens", type=int, default=65536)
    srv.add_argument(
        "--max-prefill-tokens", type=int, default=1024, help="prefill tokens per engine step"
    )
    srv.add_argument("--num-threads", type=int, help="torch threads (default 1)")
    srv.add_argument(
        "--tp-size",
        "--tensor-parallel-size",
        type=int,
        help="SGLang's tensor parallelism, on a CPU: N intra-op threads split each matmul the "
        "way TP splits it over N GPUs (the same as --num-threads N)",
    )
    srv.add_argument("--eos-token-id", type=int, help="default: the model's or the task's")
    srv.add_argument(
        "--step-delay-ms", type=float, default=0.0, help="sleep after each engine step (tests)"
    )
    srv.add_argument("--api-key", help="require Authorization: Bearer <key> (not on /health*)")
    srv.add_argument(
        "--incremental-streaming-output",
        action="store_true",
        help="stream frames carry only the new tokens (SGLang's flag; default cumulative)",
    )
    srv.set_defaults(fn=_cmd_serve)
    prof = sub.add_parser("profile", help="measure the built-in engine into a cost table")
    prof.add_argument("--json", default="runs/costmodel_cpu.json", help="write the table here")
    prof.add_argument("--quick", action="store_true", help="a small grid (under a minute)")
    prof.set_defaults(fn=_cmd_profile)
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
    sim.set_defaults(fn=_cmd_sim)
    keys = sub.add_parser("keys", help="create a CURVE key pair for tcp deployments")
    keys.add_argument("directory")
    keys.set_defaults(fn=_cmd_keys)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        code: int = args.fn(args)
    except KeyboardInterrupt:
        return 130
    except ValueError as exc:  # ConfigError and other user mistakes: one clear line
        print(f"seer: error: {exc}", file=sys.stderr)
        return 2
    return code


if __name__ == "__main__":
    sys.exit(main())
