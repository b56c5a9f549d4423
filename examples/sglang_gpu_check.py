"""The SGLang backend against a real SGLang server: a prepared check for a GPU machine.

Not run in CI (it needs a GPU and `pip install sglang>=0.5.22`). It launches
`python -m sglang.launch_server` with a small model (`--load-format dummy`, random weights,
is enough for the protocol), runs the backend's checks against it (greedy chunks resumed
across requests, finish reasons, many chunks in flight, abort with partial output, the 400
for a key outside the schema, weight versions, loads), validates every request the backend
sends with SGLang's own schema when the wheel cache (`make setup`) is there, then measures
rollout throughput on the rollout bench's workload with SGLang's speculative decoding off
and on (NGRAM), and prints and writes both.

    python examples/sglang_gpu_check.py --model Qwen/Qwen2.5-0.5B-Instruct --load-format dummy
    python examples/sglang_gpu_check.py --dry-run      # print the server commands only
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--model", default="Qwen/Qwen2.5-0.5B-Instruct", help="HF id or folder")
    p.add_argument("--load-format", default="dummy", help="dummy = random weights (protocol)")
    p.add_argument("--port", type=int, default=30000)
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--tp", type=int, default=1, help="tensor parallel size")
    p.add_argument("--mem-fraction", type=float, default=0.7)
    p.add_argument("--context-len", type=int, default=4096, help="server and client context")
    p.add_argument(
        "--spec", choices=("off", "on", "both"), default="both", help="NGRAM speculation runs"
    )
    p.add_argument("--spec-draft-tokens", type=int, default=8)
    p.add_argument("--groups", type=int, default=32, help="workload: prompts")
    p.add_argument("--group-size", type=int, default=8)
    p.add_argument("--mean-len", type=int, default=400)
    p.add_argument("--max-len", type=int, default=2000)
    p.add_argument("--chunk-size", type=int, default=256)
    p.add_argument("--policy", default="context_aware")
    p.add_argument("--server-arg", action="append", default=[], help="extra launch_server args")
    p.add_argument("--start-timeout", type=float, default=900.0)
    p.add_argument("--json", default="runs/sglang-gpu-check.json")
    p.add_argument("--dry-run", action="store_true", help="print the commands, run nothing")
    return p


def server_command(args: argparse.Namespace, speculative: bool) -> list[str]:
    cmd = [
        sys.executable, "-m", "sglang.launch_server", "--model-path", args.model,
        "--load-format", args.load_format, "--host", args.host, "--port", str(args.port),
        "--tp-size", str(args.tp), "--mem-fraction-static", str(args.mem_fraction),
        "--context-length", str(args.context_len),
    ]  # fmt: skip
    if speculative:
        cmd += ["--speculative-algorithm", "NGRAM"]
        cmd += ["--speculative-num-draft-tokens", str(args.spec_draft_tokens)]
    return cmd + list(args.server_arg)


def spec_modes(args: argparse.Namespace) -> list[bool]:
    return {"off": [False], "on": [True], "both": [False, True]}[args.spec]


def schema_hook() -> Any:
    """A request hook validating every /generate body with SGLang's schema (None without
    the wheel cache)."""
    try:
        from pipeline.serve.schema import validate_generate_request

        validate_generate_request({"input_ids": [1], "sampling_params": {"max_new_tokens": 1}})
    except Exception as exc:  # the wheel cache is optional here
        print(f"schema check off: {exc}")
        return None

    async def hook(request: Any) -> None:
        if request.path == "/generate":
            validate_generate_request(json.loads(request.content))

    return hook


async def protocol_checks(url: str, context_len: int) -> dict[str, Any]:
    import anyio

    from actors.generator import ChunkRequest, SamplingParams, ServerError
    from actors.generator.sglang.engine import SGLangEngine
    from actors.generator.sglang.options import SGLangOptions
    from actors.model import ModelOptions

    hook = schema_hook()
    engine = SGLangEngine(
        SGLangOptions(urls=(url,), context_len=context_len),
        ModelOptions(),
        event_hooks={"request": [hook]} if hook is not None else None,
    )
    await engine.start()
    greedy = SamplingParams(temperature=0.0, ignore_eos=True)
    prompt = tuple(range(100, 116))
    out: dict[str, Any] = {"context_len": engine.context_len, "schema_checked": hook is not None}

    whole = await engine.generate(ChunkRequest("whole;", prompt, 32, params=greedy))
    pieces: list[int] = []
    reasons = []
    for _ in range(4):
        chunk = ChunkRequest("pieces;", prompt, 8, tuple(pieces), greedy, max_new_tokens=32)
        result = await engine.generate(chunk)
        pieces += result.token_ids
        reasons.append(result.finish_reason)
    out["resumed_chunks_equal_one_request"] = list(whole.token_ids) == pieces
    out["finish_reasons"] = reasons
    assert reasons == ["chunk", "chunk", "chunk", "length"], reasons

    many = [ChunkRequest(f"m{i};", (i + 1,) * 8, 64, params=greedy) for i in range(64)]
    start = time.perf_counter()
    results: list[Any] = []
    async with anyio.create_task_group() as tg:
        for r in many:
            tg.start_soon(lambda r=r: _collect(engine, r, results))
    out["in_flight_64_tokens_s"] = sum(len(r.token_ids) for r in results) / (
        time.perf_counter() - start
    )
    assert len(results) == 64 and all(len(r.token_ids) == 64 for r in results)

    long = ChunkRequest("long;", prompt, 4000, params=greedy)
    aborted: list[Any] = []
    async with anyio.create_task_group() as tg:
        tg.start_soon(_collect, engine, long, aborted)
        await anyio.sleep(1.0)
        out["abort_found"] = await engine.abort("long;")
    out["abort"] = {"reason": aborted[0].finish_reason, "tokens": len(aborted[0].token_ids)}

    try:
        await engine.client.call(
            "POST", "/generate", {"input_ids": [1, 2], "sampling_params": {"max_tokens": 4}}
        )
        out["bad_key_refused"] = False
    except ServerError as exc:
        out["bad_key_refused"] = "max_tokens" in str(exc)

    await engine.client.set_weight_version(7)
    out["weight_version_after_relabel"] = await engine.client.weight_version(30.0)
    await engine.client.set_weight_version(0)
    out["loads"] = (await engine.check()).__repr__()
    await engine.aclose()
    return out


async def _collect(engine: Any, request: Any, into: list[Any]) -> None:
    into.append(await engine.generate(request))


async def throughput(url: str, args: argparse.Namespace) -> dict[str, Any]:
    from pipeline.records.workload import make_workload
    from pipeline.rollout.api import Rollout, rollout_config
    from transport.messages import PromptSpec, SamplingSpec

    workload = make_workload(
        num_groups=args.groups,
        group_size=args.group_size,
        mean_len=args.mean_len,
        max_len=args.max_len,
        vocab_size=1000,
    )
    prompts = [
        PromptSpec(prompt_id=p.prompt_id, token_ids=p.token_ids, forced_lens=p.target_lens)
        for p in workload.prompts
    ]
    sampling = SamplingSpec(temperature=1.0, seed=0, ignore_eos=True, max_new_tokens=args.max_len)
    gen = {
        "backend": "sglang",
        "max_batch": 256,
        "spec": {"mode": "off"},
        "sglang": {"urls": [url], "context_len": args.context_len},
    }
    config = rollout_config(num_generators=1, chunk_size=args.chunk_size, generator=gen)
    async with Rollout(config) as rollout:
        await rollout.generate(
            [p.token_ids for p in prompts[:2]], 2, SamplingSpec(max_new_tokens=8)
        )
        result = await rollout.generate_with_record(
            prompts, workload.group_size, sampling, policy=args.policy
        )
    m = result.metrics()
    keys = ("makespan_s", "throughput_tok_s", "tail_s", "output_tokens", "mean_accept_len")
    return {k: m[k] for k in keys}


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if args.dry_run:
        for speculative in spec_modes(args):
            print(" ".join(server_command(args, speculative)))
        return 0
    import anyio

    from actors.generator.sglang.launch import ServerProcess

    url = f"http://{args.host}:{args.port}"
    report: dict[str, Any] = {"model": args.model, "load_format": args.load_format}
    for speculative in spec_modes(args):
        name = "spec_on" if speculative else "spec_off"
        server = ServerProcess(server_command(args, speculative), url, Path(f"runs/{name}.log"))
        anyio.run(server.start, args.start_timeout)
        try:
            if not speculative or "checks" not in report:
                report["checks"] = anyio.run(protocol_checks, url, args.context_len)
                print(json.dumps(report["checks"], indent=2))
            report[name] = anyio.run(throughput, url, args)
            print(name, json.dumps(report[name]))
        finally:
            server.stop(60.0)
    if "spec_off" in report and "spec_on" in report:
        ratio = report["spec_on"]["throughput_tok_s"] / report["spec_off"]["throughput_tok_s"]
        report["spec_on_over_off"] = ratio
        print(f"NGRAM speculation on / off throughput: {ratio:.2f}x")
    Path(args.json).parent.mkdir(parents=True, exist_ok=True)
    Path(args.json).write_text(json.dumps(report, indent=2))
    print(f"wrote {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
