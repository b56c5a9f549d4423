"""A chunk-level engine for tests: only what the `Engine` protocol declares.

It stands for an out-of-process backend (an HTTP server) that takes chunks and reports
tokens and results, and verifies no client drafts: the built-in engine underneath does the
work, but the generator can only `poll` it.
"""

from __future__ import annotations

from actors.generator.engine import (
    ChunkRequest,
    ChunkResult,
    Engine,
    EngineCounters,
    EngineLoad,
    StepResult,
)
from actors.generator.options import GeneratorOptions


class ChunkOnlyEngine:
    def __init__(self, inner: Engine) -> None:
        self._inner = inner

    @property
    def weight_version(self) -> int:
        return self._inner.weight_version

    def add(self, request: ChunkRequest) -> None:
        self._inner.add(request)

    def abort(self, request_id: str) -> ChunkResult | None:
        return self._inner.abort(request_id)

    def release(self, request_id: str) -> bool:
        return self._inner.release(request_id)

    def has_work(self) -> bool:
        return self._inner.has_work()

    def poll(self) -> StepResult:
        return self._inner.poll()

    def load(self) -> EngineLoad:
        return self._inner.load()

    def counters(self) -> EngineCounters:
        return self._inner.counters()

    def update_weights(self, source: object, version: int) -> None:
        self._inner.update_weights(source, version)


def build_chunk_only(options: GeneratorOptions, index: int = 0) -> Engine:
    from actors.generator.builtin import build_torch_engine

    return ChunkOnlyEngine(build_torch_engine(options.model, options.engine_config()))
