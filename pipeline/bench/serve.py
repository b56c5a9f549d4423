"""`seer bench serve`: what SGLang's HTTP API costs on top of the built-in engine.

One workload (``num_prompts`` prompts of 8-32 random tokens, each sampled to exactly
``new_tokens`` tokens with ``ignore_eos``) on the default task's model shape (random
weights), three ways in one run, interleaved, ``repeats`` times, medians:

- ``engine``: a ``TorchEngine`` in this process, every request added at once, polled dry;
- ``http``: the same requests as concurrent non-streaming ``POST /generate`` calls to a
  ``seer serve`` subprocess (its own process and GIL, as a real client and server are);
- ``http_stream``: the same, streaming (one SSE frame per token per request).

Every variant runs on one torch thread. Throughput is generated tokens over wall time from
the first request to the last response; the ratios divide two numbers of this run. The
server is started once and warmed up; each HTTP round opens fresh connections.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Any

import torch

from actors.generator import ChunkRequest, SamplingParams
from actors.generator.builtin import EngineConfig, TorchEngine
from actors.model import LlamaModel, load_model, save_model
from pipeline.records.report import write_results

VARIANTS = ("engine", "http", "http_stream")
MAX_BATCH = 64


def _prompts(n: int, seed: int = 0) -> list[list[int]]:
    rng = random.Random(seed)
    return [[257] + [rng.randrange(256) for _ in range(rng.randrange(8, 33))] for _ in range(n)]


def _engine_round(model_path: Path, prompts: list[list[int]], new_tokens: int) -> float:
    config = EngineConfig(max_batch=MAX_BATCH, kv_budget_tokens=65536, profile=False)
    engine = TorchEngine(load_model(model_path), config)
    start = time.perf_counter()
    for i, prompt in enumerate(prompts):
        params = SamplingParams(temperature=1.0, ignore_eos=True, seed=i)
        engine.add(ChunkRequest(f"r{i}", tuple(prompt), new_tokens, params=params))
    num_tokens = 0
    while engine.has_work():
        num_tokens += sum(len(d.token_ids) for d in engine.poll().deltas)
    return num_tokens / (time.perf_counter() - start)


def _body(i: int, prompt: list[int], new_tokens: int, stream: bool, tag: str) -> dict[str, Any]:
    return {
        "rid": f"{tag}:{i}#",
        "input_ids": prompt,
        "return_logprob": True,
        "stream": stream,
        "sampling_params": {"max_new_tokens": new_tokens, "ignore_eos": True, "sampling_seed": i},
    }


async def _http_round(url: str, prompts: list[list[int]], new_tokens: int, stream: bool) -> float:
    import aiohttp

    tag = f"b{time.monotonic_ns()}"
    connector = aiohttp.TCPConnector(limit=len(prompts) + 4)
    timeout = aiohttp.ClientTimeout(total=600)
    async with aiohttp.ClientSession(url, connector=connector, timeout=timeout) as client:

        async def one(i: int, prompt: list[int]) -> int:
            body = _body(i, prompt, new_tokens, stream, tag)
            async with client.post("/generate", json=body) as response:
                response.raise_for_status()
                if not stream:
                    return len((await response.json())["output_ids"])
                last: dict[str, Any] = {}
                async for raw in response.content:
                    line = raw.decode().rstrip("\r\n")
                    if line.startswith("data: ") and line != "data: [DONE]":
                        last = json.loads(line[len("data: ") :])
                return len(last["output_ids"])

        start = time.perf_counter()
        counts = await asyncio.gather(*(one(i, p) for i, p in enumerate(prompts)))
        return sum(counts) / (time.perf_counter() - start)


def _start_server(model_path: Path) -> tuple[subprocess.Popen[str], str]:
    command = [sys.executable, "-m", "pipeline.cli", "serve", "--model", str(model_path)]
    command += ["--port", "0", "--max-batch", str(MAX_BATCH), "--num-threads", "1"]
    proc = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    assert proc.stdout is not None
    line = proc.stdout.readline()
    if "listening on " not in line:
        proc.kill()
        raise RuntimeError(f"seer serve did not start: {line!r}")
    url = line.split("listening on ")[1].split()[0]
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            with urllib.request.urlopen(f"{url}/health_generate", timeout=5) as reply:
                if reply.status == 200:
                    return proc, url
        except OSError:  # refused, reset, timed out, or an HTTP error status
            time.sleep(0.1)
    proc.kill()
    raise RuntimeError("seer serve did not become healthy within 60 s")


def run(
    json_path: str | None = None, quick: bool = False, repeats: int | None = None
) -> dict[str, Any]:
    """Run the benchmark, print its table, write JSON to ``json_path`` if given."""
    from pipeline.rl.config import RunConfig, generator_options
    from pipeline.tasks import get_task

    cfg = RunConfig()
    shape = generator_options(cfg, get_task(cfg.task), "").model.config()
    num_prompts, new_tokens = (16, 32) if quick else (64, 128)
    repeats = repeats or (1 if quick else 3)
    prompts = _prompts(num_prompts)
    previous = torch.get_num_threads()
    torch.set_num_threads(1)
    with tempfile.TemporaryDirectory() as tmp:
        model_path = Path(tmp) / "model.safetensors"
        save_model(LlamaModel.random(shape, seed=0), model_path)
        proc, url = _start_server(model_path)
        try:
            asyncio.run(_http_round(url, prompts[:4], 8, False))  # warm-up
            samples: dict[str, list[float]] = {v: [] for v in VARIANTS}
            for _ in range(repeats):
                samples["engine"].append(_engine_round(model_path, prompts, new_tokens))
                samples["http"].append(asyncio.run(_http_round(url, prompts, new_tokens, False)))
                samples["http_stream"].append(
                    asyncio.run(_http_round(url, prompts, new_tokens, True))
                )
        finally:
            proc.terminate()
            proc.wait(timeout=30)
            torch.set_num_threads(previous)
    result = _summary(samples, num_prompts, new_tokens, repeats)
    _print(result)
    if json_path:
        write_results(json_path, result, indent=1)
    return result


def _summary(
    samples: dict[str, list[float]], num_prompts: int, new_tokens: int, repeats: int
) -> dict[str, Any]:
    medians = {v: statistics.median(xs) for v, xs in samples.items()}
    return {
        "workload": {"num_prompts": num_prompts, "new_tokens": new_tokens, "repeats": repeats},
        "tok_s": medians,
        "samples_tok_s": samples,
        "ratio_vs_engine": {v: medians[v] / medians["engine"] for v in VARIANTS},
    }


def _print(result: dict[str, Any]) -> None:
    w = result["workload"]
    print(
        f"seer bench serve: {w['num_prompts']} requests x {w['new_tokens']} tokens, "
        f"median of {w['repeats']}"
    )
    for variant in VARIANTS:
        print(
            f"  {variant:<12} {result['tok_s'][variant]:>9.0f} tok/s   "
            f"{result['ratio_vs_engine'][variant]:.2f}x the engine"
        )


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """`seer bench serve`'s own flags (beside --json and --quick)."""
    parser.add_argument("--repeats", type=int, help="runs per variant (the median is reported)")


def run_args(args: argparse.Namespace) -> None:
    """`seer bench serve` from its parsed flags."""
    run(args.json, quick=args.quick, repeats=args.repeats)
