"""Shared helpers of the engine tests: tiny models, a driver loop, reference generations."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from functools import cache

import torch

from actors.generator import (
    ChunkRequest,
    ChunkResult,
    Draft,
    SamplingParams,
)
from actors.generator.builtin import EngineConfig, TorchEngine
from actors.model import LlamaModel, ModelConfig

TINY = ModelConfig(
    vocab_size=32,
    hidden=32,
    num_layers=2,
    num_heads=4,
    num_kv_heads=2,
    intermediate=64,
    max_context=128,
)
GREEDY = SamplingParams(temperature=0.0)

DraftFn = Callable[[str, list[int]], Draft | None]


@cache
def tiny_model(seed: int = 0, std: float = 0.5) -> LlamaModel:
    return LlamaModel.random(TINY, seed=seed, std=std).eval()


def make_engine(model: LlamaModel | None = None, **overrides: object) -> TorchEngine:
    options: dict[str, object] = {
        "max_batch": 8,
        "kv_budget_tokens": 4096,
        "profile": False,
        "num_threads": 1,
    }
    options.update(overrides)
    return TorchEngine(model or tiny_model(), EngineConfig(**options))  # type: ignore[arg-type]


@dataclass
class Run:
    results: dict[str, ChunkResult] = field(default_factory=dict)
    peaks: list[int] = field(default_factory=list)

    def tokens(self, rid: str) -> tuple[int, ...]:
        return self.results[rid].token_ids


def drive(
    engine: TorchEngine,
    requests: Sequence[ChunkRequest],
    draft_fn: DraftFn | None = None,
    max_steps: int = 10_000,
) -> Run:
    """Add ``requests``, step until idle, feeding drafts from ``draft_fn(id, context)``."""
    contexts = {r.request_id: [*r.prompt_ids, *r.generated_ids] for r in requests}
    for request in requests:
        engine.add(request)
    run = Run()
    for _ in range(max_steps):
        if not engine.has_work():
            return run
        drafts: dict[str, Draft] = {}
        if draft_fn is not None:
            for rid in engine.decoding_request_ids():
                draft = draft_fn(rid, contexts[rid])
                if draft is not None:
                    drafts[rid] = draft
        step = engine.step(drafts)
        for delta in step.deltas:
            contexts.setdefault(delta.request_id, []).extend(delta.token_ids)
        for result in step.finished:
            run.results[result.request_id] = result
        load = engine.load()
        assert load.kv_tokens_used <= load.kv_tokens_total
        run.peaks.append(load.kv_tokens_used)
    raise AssertionError("engine did not finish")


def reference_greedy(model: LlamaModel, prompt: Sequence[int], n: int) -> list[int]:
    """Greedy continuation by the uncached full forward, one token at a time."""
    ids = list(prompt)
    with torch.no_grad():
        for _ in range(n):
            ids.append(int(model(torch.tensor([ids]))[0, -1].argmax()))
    return ids[len(prompt) :]


def greedy_request(
    rid: str, prompt: Sequence[int], n: int, generated: Sequence[int] = (), **kwargs: object
) -> ChunkRequest:
    return ChunkRequest(rid, tuple(prompt), n, tuple(generated), GREEDY, **kwargs)  # type: ignore[arg-type]
