"""Helpers of the `seer serve` tests: a tiny model on disk, and an HTTP client that checks
every /generate request and response against SGLang 0.5.23's own schema."""

from __future__ import annotations

import json
import threading
from collections.abc import Callable
from concurrent.futures import Future
from pathlib import Path
from typing import Any

import httpx

from actors.generator import ChunkRequest, SamplingParams
from actors.generator.builtin import EngineConfig, TorchEngine
from actors.model import LlamaModel, ModelConfig, load_model, save_model
from pipeline.serve import ServeOptions
from pipeline.serve.schema import validate_generate_request, validate_generate_response

EOS = 258
TINY = ModelConfig(
    vocab_size=259,
    hidden=64,
    num_layers=2,
    num_heads=4,
    num_kv_heads=2,
    intermediate=128,
    max_context=256,
)


OPTIONS = ServeOptions(eos_token_id=EOS)  # `seer serve` finds this eos for a byte model


def save_tiny(path: Path, seed: int = 0) -> Path:
    save_model(LlamaModel.random(TINY, seed=seed), path)
    return path


def engine_greedy(model_path: Path, prompts: list[list[int]], max_new: int) -> list[list[int]]:
    """The built-in engine's greedy tokens for each prompt (no server in between)."""
    engine = TorchEngine(load_model(model_path), EngineConfig(eos_token_id=EOS, profile=False))
    greedy = SamplingParams(temperature=0.0)
    for i, prompt in enumerate(prompts):
        engine.add(ChunkRequest(f"r{i}", tuple(prompt), max_new, params=greedy))
    out: dict[str, list[int]] = {f"r{i}": [] for i in range(len(prompts))}
    while engine.has_work():
        for delta in engine.poll().deltas:
            out[delta.request_id].extend(delta.token_ids)
    return [out[f"r{i}"] for i in range(len(prompts))]


def greedy_body(prompt: list[int], max_new: int, rid: str, **extra: Any) -> dict[str, Any]:
    body = {
        "rid": rid,
        "input_ids": prompt,
        "return_logprob": True,
        "sampling_params": {
            "max_new_tokens": max_new,
            "temperature": 0.0,
            "no_stop_trim": True,
            "skip_special_tokens": False,
            "spaces_between_special_tokens": False,
        },
    }
    return {**body, **extra}


class CheckedClient:
    """httpx with SGLang's schema judging every valid /generate request it sends and
    every /generate response (and stream frame) it gets back."""

    def __init__(self, url: str, timeout_s: float = 60.0) -> None:
        self.http = httpx.Client(base_url=url, timeout=timeout_s)
        self.num_checked = 0

    def generate(self, body: dict[str, Any]) -> httpx.Response:
        validate_generate_request(body)
        response = self.http.post("/generate", json=body)
        if response.status_code == 200:
            validate_generate_response(response.json())
            self.num_checked += 1
        return response

    def stream(self, body: dict[str, Any]) -> list[dict[str, Any]]:
        """Every frame of a streaming /generate (checked), ending at `data: [DONE]`."""
        payload = {**body, "stream": True}
        validate_generate_request(payload)
        frames: list[dict[str, Any]] = []
        with self.http.stream("POST", "/generate", json=payload) as response:
            assert response.status_code == 200
            assert response.headers["content-type"].startswith("text/event-stream")
            for frame in sse_frames(response.iter_text()):
                if frame == "[DONE]":
                    return frames
                obj = json.loads(frame)
                if "error" not in obj:
                    validate_generate_response(obj)
                    self.num_checked += 1
                frames.append(obj)
        raise AssertionError("the stream ended without data: [DONE]")

    def close(self) -> None:
        self.http.close()


def sse_frames(chunks: Any) -> Any:
    """The `data:` payloads of an SSE byte stream, checking SGLang's framing exactly."""
    buffer = ""
    for chunk in chunks:
        buffer += chunk
        while "\n\n" in buffer:
            event, buffer = buffer.split("\n\n", 1)
            assert event.startswith("data: "), event
            yield event[len("data: ") :]
    assert buffer == "", f"trailing bytes after the last frame: {buffer!r}"


def in_background(fn: Callable[[], Any]) -> Future[Any]:
    """Run ``fn`` on a daemon thread; its result (or exception) in the future."""
    future: Future[Any] = Future()

    def run() -> None:
        try:
            future.set_result(fn())
        except BaseException as exc:
            future.set_exception(exc)

    threading.Thread(target=run, daemon=True).start()
    return future
