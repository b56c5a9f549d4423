"""Engine: the protocol every generation backend implements, and the plain data it speaks.

A Generator actor drives one ``Engine``, chunk by chunk: it ``add``s chunk requests, calls
``poll`` in a loop (in a worker thread) and forwards each call's ``StepDelta``s (new
tokens) and finished ``ChunkResult``s; it reads ``load`` and ``counters`` for the
scheduler, and swaps weights with ``update_weights`` between iterations. A backend behind
a network API implements ``RemoteEngine`` instead (one awaited call per chunk, many in
flight; ``actors.generator.sglang``).

An engine that verifies client drafts in its own decode steps also implements
``SpeculativeEngine``: the actor then calls ``step(drafts)`` with drafts for the requests
that ``decoding_request_ids`` names, and the speculation policy reads ``step_time``. The
built-in ``TorchEngine`` (``actors.generator.builtin``) is such an engine.

Contract:
- One chunk = at most ``max_chunk_tokens`` new tokens of one request. It ends with a
  ``ChunkResult`` whose finish reason is ``"stop"`` (EOS or a stop token), ``"length"``
  (context or the request's ``max_new_tokens`` reached), ``"chunk"`` (this chunk's budget reached,
  the request is not finished), ``"abort"`` (the engine stopped it, or failed it for a
  reason of its own: the scheduler re-queues it) or ``"error"`` (the request is bad).
- Bad input raises an ``EngineError`` subclass (a ``ValueError``) before any state changes;
  the engine keeps serving. ``error_result`` turns one into a ``ChunkResult``.
- Every output carries the weight version that produced it.
Everything here is synchronous and msgpack-friendly (ints, floats, strings, tuples).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Literal, Protocol, runtime_checkable

from actors.generator.errors import (
    ContextOverflowError,
    DraftError,
    InvalidRequestError,
    TokenOutOfVocabError,
)

FinishReason = Literal["stop", "length", "chunk", "abort", "error"]


@dataclass(frozen=True, slots=True)
class Draft:
    """A chain or tree of proposed tokens after a request's last real token.

    ``token_ids[i]`` is node ``i``; ``parents[i]`` is the index of its parent node, ``-1``
    for a child of the last real token, always ``< i`` (topological order). Siblings must
    carry distinct tokens (lossless verification walks distinct children). A chain is the
    tree whose parents are ``-1, 0, 1, ...``."""

    token_ids: tuple[int, ...]
    parents: tuple[int, ...]

    @classmethod
    def chain(cls, token_ids: Sequence[int]) -> Draft:
        return cls(tuple(token_ids), tuple(range(-1, len(token_ids) - 1)))

    def __len__(self) -> int:
        return len(self.token_ids)


@dataclass(frozen=True, slots=True)
class SamplingParams:
    """temperature 0 = greedy; top_k 0 = off; top_p 1 = off; seed None = derived from the
    request id (so a request resumed elsewhere draws the same coins)."""

    temperature: float = 1.0
    top_k: int = 0
    top_p: float = 1.0
    seed: int | None = None
    ignore_eos: bool = False
    stop_token_ids: tuple[int, ...] = ()

    def validate(self) -> None:
        if not self.temperature >= 0:
            raise InvalidRequestError(f"temperature must be >= 0, got {self.temperature!r}")
        if self.top_k < 0:
            raise InvalidRequestError(f"top_k must be >= 0 (0 = off), got {self.top_k}")
        if not 0 < self.top_p <= 1:
            raise InvalidRequestError(f"top_p must be in (0, 1], got {self.top_p!r}")


@dataclass(frozen=True, slots=True)
class ChunkRequest:
    """Generate at most ``max_chunk_tokens`` more tokens of one request, whose whole output
    may not pass ``max_new_tokens`` (None: the context alone limits it).

    ``generated_ids`` are the tokens earlier chunks produced; the engine reuses resident KV
    for them when it has it and re-prefills otherwise. ``weight_version`` None = any.
    """

    request_id: str
    prompt_ids: tuple[int, ...]
    max_chunk_tokens: int
    generated_ids: tuple[int, ...] = ()
    params: SamplingParams = field(default_factory=SamplingParams)
    weight_version: int | None = None
    max_new_tokens: int | None = None

    @property
    def num_context_tokens(self) -> int:
        return len(self.prompt_ids) + len(self.generated_ids)


@dataclass(frozen=True, slots=True)
class StepDelta:
    """Tokens one request gained in one step (several when drafts were accepted)."""

    request_id: str
    token_ids: tuple[int, ...]
    logprobs: tuple[float, ...]
    num_draft_tokens: int = 0
    num_accepted_tokens: int = 0


@dataclass(frozen=True, slots=True)
class ChunkResult:
    """The end of one chunk: every token it produced, their logprobs, and why it ended."""

    request_id: str
    token_ids: tuple[int, ...]
    logprobs: tuple[float, ...]
    finish_reason: FinishReason
    weight_version: int
    error: str | None = None
    num_cached_tokens: int = 0
    num_draft_tokens: int = 0
    num_accepted_tokens: int = 0
    num_verify_steps: int = 0  # a server's own speculation (SGLang's spec_verify_ct), or 0

    @property
    def is_finished(self) -> bool:
        """True when the request is done for good (not merely this chunk)."""
        return self.finish_reason != "chunk"


@dataclass(frozen=True, slots=True)
class StepResult:
    deltas: tuple[StepDelta, ...]
    finished: tuple[ChunkResult, ...]
    num_decode_rows: int = 0
    num_prefill_tokens: int = 0
    num_draft_tokens: int = 0
    num_decode_context_tokens: int = 0  # cached tokens the decoding rows attended over
    num_prefill_requests: int = 0  # requests the prefill tokens belong to
    num_decode_max_context: int = 0  # the longest decoding row's cached tokens
    num_draft_max: int = 0  # the largest decoding row's draft nodes


@dataclass(frozen=True, slots=True)
class EngineLoad:
    num_running: int
    num_waiting: int
    num_parked: int
    kv_tokens_used: int
    kv_tokens_total: int
    max_running: int  # batch slots: chunks that can decode at once


@dataclass(frozen=True, slots=True)
class EngineCounters:
    """Monotonic totals since start-up (a snapshot)."""

    num_steps: int = 0
    num_prefill_tokens: int = 0
    num_reprefills: int = 0
    num_reprefilled_tokens: int = 0
    num_preemptions: int = 0
    num_recomputed_tokens: int = 0
    num_generated_tokens: int = 0
    num_draft_tokens: int = 0
    num_accepted_tokens: int = 0
    num_parked_hits: int = 0
    num_parked_evictions: int = 0
    kv_tokens_peak: int = 0


# what the request itself did wrong: it would fail on any engine, so its sample ends in
# "error"; any other failure (another weight version, a server's bad answer, a duplicate)
# is the engine's, and the chunk is reported as "abort" for the scheduler to re-queue
REQUEST_FAULTS: tuple[type[Exception], ...] = (
    InvalidRequestError,
    ContextOverflowError,
    TokenOutOfVocabError,
    DraftError,
)


def error_result(request_id: str, exc: BaseException, weight_version: int) -> ChunkResult:
    """A ``ChunkResult`` reporting ``exc`` for a chunk the engine could not run: finish
    reason ``"error"`` when the request is at fault (``REQUEST_FAULTS``: its sample ends),
    ``"abort"`` when the engine is (the scheduler re-queues the chunk from its committed
    progress and counts the fault against this instance), with the message either way."""
    message = f"{type(exc).__name__}: {exc}"
    reason: FinishReason = "error" if isinstance(exc, REQUEST_FAULTS) else "abort"
    return ChunkResult(request_id, (), (), reason, weight_version, error=message)


@runtime_checkable
class Engine(Protocol):
    """A chunk-level generation backend: what a Generator actor needs from any engine."""

    @property
    def weight_version(self) -> int: ...

    def add(self, request: ChunkRequest) -> None:
        """Queue a chunk; raises ``EngineError`` for bad input."""

    def abort(self, request_id: str) -> ChunkResult | None:
        """Stop a request: its chunk ends with ``"abort"`` and the tokens so far (None when
        it was only parked, whose KV is dropped). Raises ``RequestNotInEngineError``."""

    def release(self, request_id: str) -> bool:
        """Drop a parked request's KV; False when none was resident."""

    def has_work(self) -> bool: ...

    def poll(self) -> StepResult:
        """Make progress on the queued chunks; what happened since the last call (new tokens
        per request, chunks that ended). Blocking: the actor runs it in a worker thread."""

    def load(self) -> EngineLoad: ...

    def counters(self) -> EngineCounters: ...

    def update_weights(self, source: object, version: int) -> None:
        """Swap weights between iterations (idle engine); parked KV is dropped."""


@runtime_checkable
class SpeculativeEngine(Engine, Protocol):
    """Optional capability: an engine that verifies client drafts in its decode steps."""

    def decoding_request_ids(self) -> list[str]:
        """Requests that decode in the next step: the ones drafts may be given for."""

    def step(self, drafts: Mapping[str, Draft] | None = None) -> StepResult:
        """Run one iteration: admit, prefill a budget of tokens, decode (verify drafts)."""

    # whether a verify step costs what it would were every row drafting the longest draft
    # (attention padded to the longest query); the draft budget is then a depth
    pads_drafts: bool

    def step_time(self, batch: int, draft_len: int) -> float:
        """Profiled seconds of one verify step of ``batch`` rows with ``draft_len`` drafts."""

    def measure_step_times(self) -> None:
        """Profile step times now (start-up), rather than on the first ``step_time``."""


@runtime_checkable
class RemoteEngine(Protocol):
    """An engine behind a network API (an SGLang server): many chunks in flight at once, each
    an awaitable call, so the actor awaits chunks concurrently instead of polling a step
    loop. The server batches them. ``generate`` raises ``EngineError`` for a request the
    server refuses, and ``ServerLostError`` when the server stops serving: the chunk is then
    not reported and ``check`` fails, so the scheduler's generator watch re-queues it."""

    @property
    def weight_version(self) -> int: ...

    def load(self) -> EngineLoad:
        """The last load seen (no I/O)."""

    def counters(self) -> EngineCounters: ...

    async def start(self) -> None:
        """Attach to (or launch) the server and wait until it serves."""

    async def aclose(self) -> None:
        """Close connections; stop a server this engine launched."""

    async def generate(self, request: ChunkRequest) -> ChunkResult: ...

    async def abort(self, request_id: str) -> bool:
        """Abort the request's chunk in flight (it returns ``"abort"`` with its partial
        tokens); False when none is."""

    async def update_weights(self, source: object, version: int) -> None: ...

    async def check(self) -> EngineLoad:
        """A fresh load; raises ``ServerLostError`` when the server is lost or was lost since
        the last call (so a caller that re-queues on failure hears of every lost chunk)."""

    async def watch(self) -> None:
        """Background health checks while chunks are in flight (runs until cancelled)."""


def check_chunk_request(request: ChunkRequest) -> None:
    """The checks every engine makes of a chunk before it runs (id, prompt, budgets,
    sampling parameters); engines add their own (vocabulary, context, KV budget)."""
    rid = request.request_id
    if not isinstance(rid, str) or not rid:
        raise InvalidRequestError(f"request id must be a non-empty string, got {rid!r}")
    if not request.prompt_ids:
        raise InvalidRequestError(f"request {rid!r} has an empty prompt")
    if request.max_chunk_tokens <= 0:
        raise InvalidRequestError(
            f"request {rid!r}: max_chunk_tokens must be > 0, got {request.max_chunk_tokens}"
        )
    total = request.max_new_tokens
    if total is not None and total <= len(request.generated_ids):
        raise InvalidRequestError(
            f"request {rid!r}: max_new_tokens {total} leaves nothing to generate after "
            f"{len(request.generated_ids)} generated tokens"
        )
    request.params.validate()
