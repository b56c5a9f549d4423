"""InstantGenerator: a stand-in generator actor that answers every chunk at once, no model.

For `seer bench scheduler`, which measures the control plane alone (splitter, estimator,
scheduler and the sockets between them) at request rates a model could not sustain on
this machine. It speaks the generator's protocol exactly: it consumes `ChunkAssigned`,
`EndRollout` and `GetLoad`, and answers each `ChunkAssigned` at once with the
`ChunkFinished` a `GeneratorActor` would send: `max_chunk_tokens` made-up tokens (fewer when the
request's `max_new_tokens` comes first; then the finish reason is "length", else "chunk"),
one logprob per token, and the instance's `LoadInfo` (nothing running, the requests it
holds between chunks parked, their context as KV). Nothing is queued, so the scheduler's
own turnaround is all a rollout's time. It does not sample, verify drafts, take weights
(`WeightsBucket` is not handled) or stop early on a stop token.

Kind in a topology: "pipeline.bench.standin:InstantGenerator". Imports nothing heavy
(no torch), so that dozens of them start quickly.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass

from actors.base import Actor, ActorContext, Handler
from actors.options import check_positive
from transport.messages import (
    ChunkAssigned,
    ChunkFinished,
    EndRollout,
    GetLoad,
    LoadInfo,
    LoadReport,
    Message,
)

KIND = "pipeline.bench.standin:InstantGenerator"


@dataclass(frozen=True, kw_only=True)
class InstantGeneratorOptions:
    """`max_batch`: the slots it reports (the scheduler's per-instance cap follows it).
    `kv_budget_tokens`: the KV budget it reports. `vocab_size`: made-up tokens lie below."""

    max_batch: int = 32
    kv_budget_tokens: int = 1 << 22
    vocab_size: int = 256

    def __post_init__(self) -> None:
        check_positive(self, "max_batch", "kv_budget_tokens", "vocab_size")


class InstantGenerator(Actor):
    role = "generator"
    Options = InstantGeneratorOptions

    def __init__(self, ctx: ActorContext) -> None:
        super().__init__(ctx)
        self.opts: InstantGeneratorOptions = ctx.options or InstantGeneratorOptions()
        self.parked: dict[str, int] = {}  # request id -> context tokens it would keep as KV
        self.kv_tokens_used = 0  # their sum, kept as it changes (no scan per chunk)
        self.weight_version = 0
        self._outputs: dict[int, tuple[tuple[int, ...], tuple[float, ...]]] = {}
        self.num_chunks = 0
        self.num_generated_tokens = 0

    def handlers(self) -> Mapping[type[Message], Handler]:
        return {
            ChunkAssigned: self.handle_chunk_assigned,
            EndRollout: self.handle_end_rollout,
            GetLoad: self.handle_get_load,
        }

    def counters(self) -> dict[str, float]:
        return {"num_chunks": self.num_chunks}

    async def handle_chunk_assigned(self, msg: ChunkAssigned) -> None:
        start = time.time()
        done = len(msg.generated_ids)
        n = max(0, min(msg.max_chunk_tokens, msg.max_new_tokens - done))
        reason = "chunk" if done + n < msg.max_new_tokens else "length"
        cached = self._unpark(msg.request_id)  # a chunk that moved here re-prefills
        if reason == "chunk":
            self.parked[msg.request_id] = context = len(msg.prompt_ids) + done + n
            self.kv_tokens_used += context
        self.weight_version = msg.weight_version
        self.num_chunks += 1
        self.num_generated_tokens += n
        tokens, logprobs = self._made_up(n)
        result = ChunkFinished(
            rollout_id=msg.rollout_id,
            request_id=msg.request_id,
            chunk_seq=msg.chunk_seq,
            instance=self.ctx.index,
            token_ids=tokens,
            logprobs=logprobs,
            finish_reason=reason,
            weight_version=msg.weight_version,
            start_time=start,
            end_time=time.time(),
            num_cached_tokens=cached,
            load=self.load_info(),
        )
        await self.send_to("scheduler", 0, result)

    def _made_up(self, n: int) -> tuple[tuple[int, ...], tuple[float, ...]]:
        """`n` tokens below the vocabulary and their logprobs (the same for every chunk of
        `n`, made once: the stand-in's own cost should stay out of the measurement)."""
        if n not in self._outputs:
            vocab = self.opts.vocab_size
            tokens = tuple((7 * i + 3) % vocab for i in range(n))
            self._outputs[n] = tokens, tuple(-0.5 - 0.01 * (i % 7) for i in range(n))
        return self._outputs[n]

    async def handle_end_rollout(self, msg: EndRollout) -> None:
        for request_id in msg.request_ids:
            self._unpark(request_id)

    def _unpark(self, request_id: str) -> int:
        context = self.parked.pop(request_id, 0)
        self.kv_tokens_used -= context
        return context

    async def handle_get_load(self, msg: GetLoad) -> LoadReport:
        return LoadReport(load=self.load_info())

    def load_info(self) -> LoadInfo:
        return LoadInfo(
            instance=self.ctx.index,
            num_running=0,
            num_waiting=0,
            num_parked=len(self.parked),
            kv_tokens_used=self.kv_tokens_used,
            kv_tokens_total=self.opts.kv_budget_tokens,
            max_running=self.opts.max_batch,
            weight_version=self.weight_version,
            num_generated_tokens=self.num_generated_tokens,
        )
