"""`seer serve`: the built-in engine behind SGLang's HTTP API (pipeline/serve/)."""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pipeline.serve import DefaultModel


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> argparse.ArgumentParser:
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
        "--admin-api-key",
        help="the control routes (pause, weights, abort, flush) take only this key (SGLang's)",
    )
    srv.add_argument(
        "--context-length", type=int, help="cap the model's context (SGLang's; default the model's)"
    )
    srv.add_argument(  # SGLang's flags a launching backend passes: ids suffice here
        "--skip-tokenizer-init",
        action="store_true",
        help="accepted for SGLang's command line: seer serve takes and returns token ids only",
    )
    srv.add_argument(
        "--tokenizer-path", help="accepted for SGLang's command line; seer serve uses no tokenizer"
    )
    srv.add_argument(
        "--incremental-streaming-output",
        action="store_true",
        help="stream frames carry only the new tokens (SGLang's flag; default cumulative)",
    )
    return srv


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


def run(args: argparse.Namespace) -> int:
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
            admin_api_key=args.admin_api_key or "",
            context_length=args.context_length,
            incremental_streaming_output=args.incremental_streaming_output,
            default_model=serve_default_model(),
        )
    )
    return 0
