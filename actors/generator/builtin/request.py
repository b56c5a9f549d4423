"""EngineRequest: the engine's private book of one request between ``add`` and its result.

``tokens`` is the whole sequence (prompt, earlier chunks, this chunk). ``cache_len`` tokens
have KV in the request's slot; a decoding request has ``cache_len == len(tokens) - 1`` (its
last token is the next step's input), a prefilling one less. ``reserved`` is what the
request books against the KV budget: its prefill target while prefilling, ``cache_len``
afterwards.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum

from actors.generator.builtin.sampler import request_seed
from actors.generator.engine import ChunkRequest, ChunkResult, FinishReason


class Phase(Enum):
    WAITING = "waiting"
    PREFILL = "prefill"
    DECODE = "decode"


@dataclass(slots=True, eq=False)
class EngineRequest:
    request: ChunkRequest
    tokens: list[int]
    seed: int
    stop_ids: frozenset[int]
    max_len: int  # the sequence may not grow past this many tokens (context / total cap)
    phase: Phase = Phase.WAITING
    cache_len: int = 0
    reserved: int = 0
    admitted_at: int = -1
    is_recompute: bool = False  # preempted: the next prefill is a recompute
    is_reprefill: bool = False  # arrived with generated tokens but no resident KV
    new_ids: list[int] = field(default_factory=list)
    new_logprobs: list[float] = field(default_factory=list)
    num_cached_tokens: int = 0
    num_draft_tokens: int = 0
    num_accepted_tokens: int = 0

    @classmethod
    def create(
        cls, request: ChunkRequest, eos_token_id: int | None, max_seq_len: int
    ) -> EngineRequest:
        params = request.params
        stops = set(params.stop_token_ids)
        if eos_token_id is not None and not params.ignore_eos:
            stops.add(eos_token_id)
        max_len = max_seq_len
        if request.max_new_tokens is not None:
            max_len = min(max_len, len(request.prompt_ids) + request.max_new_tokens)
        tokens = [*request.prompt_ids, *request.generated_ids]
        seed = request_seed(request.request_id, params.seed)
        return cls(request, tokens, seed, frozenset(stops), max_len)

    @property
    def request_id(self) -> str:
        return self.request.request_id

    @property
    def budget_left(self) -> int:
        """Tokens this chunk may still emit."""
        chunk_left = self.request.max_chunk_tokens - len(self.new_ids)
        return min(chunk_left, self.max_len - len(self.tokens))

    def append(self, token_ids: list[int], logprobs: list[float]) -> FinishReason | None:
        """Append emitted tokens (already truncated to ``budget_left``); the finish reason
        when the chunk ends here."""
        self.tokens.extend(token_ids)
        self.new_ids.extend(token_ids)
        self.new_logprobs.extend(logprobs)
        if token_ids and token_ids[-1] in self.stop_ids:
            return "stop"
        if len(self.tokens) >= self.max_len:
            return "length"
        if len(self.new_ids) >= self.request.max_chunk_tokens:
            return "chunk"
        return None

    def truncate(self, token_ids: list[int]) -> int:
        """How many of ``token_ids`` to keep: up to the first stop token, within budget."""
        keep = min(len(token_ids), self.budget_left)
        for i in range(keep):
            if token_ids[i] in self.stop_ids:
                return i + 1
        return keep

    def result(
        self, reason: FinishReason, weight_version: int, error: str | None = None
    ) -> ChunkResult:
        return ChunkResult(
            self.request_id,
            tuple(self.new_ids),
            tuple(self.new_logprobs),
            reason,
            weight_version,
            error,
            self.num_cached_tokens,
            self.num_draft_tokens,
            self.num_accepted_tokens,
        )
