"""TorchEngine: the built-in engine (continuous batching, resumable chunks, draft verification).

One ``step``: validate drafts, admit waiting requests into free slots (reusing parked KV),
make room in the KV budget (see ``batcher.py``), run one batched decode forward over the
decoding rows with their drafts verified as trees, accept tokens losslessly (``verify.py``),
then run one prefill forward of at most ``max_prefill_tokens`` tokens over prefilling rows
(chunked prefill). A chunk that reaches its budget parks its KV; the next chunk of that
request on this engine resumes with no prefill; a chunk that arrives elsewhere is
re-prefilled. Weights are swapped between iterations under an integer version that every
result carries. Set ``num_threads`` per engine: torch's thread pool is per process.

Not here: sockets, async, drafting (drafts come from the caller), request routing.
"""

from __future__ import annotations

from collections.abc import Mapping
from itertools import accumulate
from os import PathLike

import torch

from actors.generator.builtin.batch import ParkedEntry
from actors.generator.builtin.batcher import Batcher
from actors.generator.builtin.config import EngineConfig
from actors.generator.builtin.draft_tree import DraftTree
from actors.generator.builtin.kv_cache import KVCache
from actors.generator.builtin.profile import StepProfile
from actors.generator.builtin.request import EngineRequest, Phase
from actors.generator.builtin.runner import ModelRunner
from actors.generator.builtin.sampler import choose_tokens
from actors.generator.builtin.step_plan import (
    decode_inputs,
    plan_drafts,
    prefill_inputs,
    validate_request,
)
from actors.generator.builtin.verify import accept
from actors.generator.engine import (
    ChunkRequest,
    ChunkResult,
    Draft,
    EngineCounters,
    EngineLoad,
    FinishReason,
    StepDelta,
    StepResult,
)
from actors.generator.errors import DuplicateRequestError, EngineBusyError, RequestNotInEngineError
from actors.model.llama import LlamaModel
from actors.model.packed import PackedWeights
from actors.model.weights import load_state_dict, load_weights_into


class TorchEngine:
    """The ``Engine`` protocol on a ``LlamaModel`` in this process (owns and mutates it)."""

    # attention runs on a (rows, longest query) grid (``actors.model.layout``): a verify
    # step costs about what it would were every row drafting the longest draft
    pads_drafts = True

    def __init__(
        self, model: LlamaModel, config: EngineConfig | None = None, weight_version: int = 0
    ) -> None:
        self.config = cfg = config or EngineConfig()
        if cfg.num_threads is not None:
            torch.set_num_threads(cfg.num_threads)
        self.model = model.eval()
        self.max_seq_len = min(
            cfg.max_seq_len or model.config.max_context, model.config.max_context
        )
        self._version = weight_version
        param = next(model.parameters())  # the cache lives where the weights do
        self._cache = KVCache(
            model.config, cfg.max_batch + 1, self.max_seq_len, param.dtype, param.device
        )
        packed = PackedWeights(self.model) if cfg.packed_weights else None
        self._runner = ModelRunner(self.model, self._cache, packed)
        self._counts = dict.fromkeys(EngineCounters.__dataclass_fields__, 0)
        self._sched = Batcher(
            cfg, self._cache, self._counts, lambda slot: self._finish(slot, "length")
        )
        self._by_id: dict[str, EngineRequest] = {}
        self._deltas: list[StepDelta] = []
        self._finished: list[ChunkResult] = []
        self._done: list[tuple[EngineRequest, FinishReason]] = []  # this step's, to end
        self._profile = self._measure_profile() if cfg.profile else None

    # ---- queries -------------------------------------------------------------------------
    @property
    def weight_version(self) -> int:
        return self._version

    @property
    def vocab_size(self) -> int:
        return self.model.config.vocab_size

    def has_work(self) -> bool:
        return bool(self._by_id)

    def decoding_request_ids(self) -> list[str]:
        return [r.request_id for r in self._sched.batch.decoding]

    def load(self) -> EngineLoad:
        s = self._sched
        return EngineLoad(
            len(s.batch),
            len(s.waiting),
            len(s.parked),
            s.kv_tokens_used(),
            self.config.kv_budget_tokens,
            self.config.max_batch,
        )

    def counters(self) -> EngineCounters:
        return EngineCounters(**self._counts)

    @property
    def profile(self) -> StepProfile:
        if self._profile is None:
            self._profile = self._measure_profile()
        return self._profile

    def step_time(self, batch: int, draft_len: int) -> float:
        return self.profile.seconds(batch, draft_len)

    def measure_step_times(self) -> None:
        _ = self.profile

    # ---- requests ------------------------------------------------------------------------
    def add(self, request: ChunkRequest) -> None:
        validate_request(
            request, self.vocab_size, self.max_seq_len, self.config.kv_budget_tokens, self._version
        )
        if request.request_id in self._by_id:
            raise DuplicateRequestError(f"request {request.request_id!r} is already in flight")
        state = EngineRequest.create(request, self.config.eos_token_id, self.max_seq_len)
        self._sched.waiting.append(state)
        self._by_id[request.request_id] = state

    def abort(self, request_id: str) -> ChunkResult | None:
        state = self._by_id.pop(request_id, None)
        was_parked = self._sched.parked.pop(request_id) is not None
        if state is None:
            if was_parked:
                return None
            raise RequestNotInEngineError(f"no request {request_id!r} on this engine")
        if state.phase is Phase.WAITING:
            self._sched.waiting.remove(state)
        else:
            self._sched.batch.remove(self._sched.batch.slot_of(state))
        return state.result("abort", self._version)

    def release(self, request_id: str) -> bool:
        return self._sched.parked.pop(request_id) is not None

    def update_weights(self, source: object, version: int) -> None:
        """``source``: a state dict or a safetensors path. Parked KV is stale: dropped."""
        if self.has_work():
            raise EngineBusyError("weights can only be swapped while no request is in flight")
        load_weights_into(self.model, _as_state_dict(source))
        self._sched.parked.clear()
        self._version = version

    # ---- the step ------------------------------------------------------------------------
    def poll(self) -> StepResult:
        """One step without drafts (the chunk-level `Engine` view of `step`)."""
        return self.step()

    def step(self, drafts: Mapping[str, Draft] | None = None) -> StepResult:
        """One iteration; drafts for requests not decoding this step are ignored."""
        trees = plan_drafts(
            drafts,
            self._sched.batch.decoding,
            self.vocab_size,
            self.config.max_draft_tokens,
            self.max_seq_len,
        )
        self._counts["num_steps"] += 1
        self._deltas, self._finished, self._done = [], [], []
        self._sched.admit()
        trees = self._sched.make_room(trees)
        decoding = {r.request_id for r in self._sched.batch.decoding}
        drafted = [t.num_nodes for rid, t in trees.items() if rid in decoding]
        contexts = [r.cache_len for r in self._sched.batch.decoding]
        rows = self._decode(trees)
        prefilled, segments = self._prefill()
        self._finish_all()
        return StepResult(
            tuple(self._deltas),
            tuple(self._finished),
            rows,
            prefilled,
            sum(drafted),
            sum(contexts),
            segments,
            max(contexts, default=0),
            max(drafted, default=0),
        )

    def _decode(self, trees: dict[str, DraftTree]) -> int:
        rows = self._sched.batch.decoding
        if not rows:
            return 0
        segments, sampling = decode_inputs(rows, trees)
        logits = self._runner.forward(0, segments)  # (N, V)
        choices, logprobs = (t.tolist() for t in choose_tokens(logits, sampling))
        offsets = [0, *accumulate(len(s.token_ids) for s in segments)]
        for slot, state in enumerate(rows):
            tree = trees.get(state.request_id)
            tokens, lps, path = accept(tree, choices, logprobs, offsets[slot])
            n = state.truncate(tokens)
            if tree is not None:  # accepted nodes' KV moves next to the prefix
                base = state.cache_len
                self._cache.compact(
                    slot, [base + p for p in path[1:n]], list(range(base + 1, base + n))
                )
            reason = self._emit(state, tokens[:n], lps[:n], tree.num_nodes if tree else 0)
            if reason is not None:
                self._done.append((state, reason))
        return len(rows)

    def _prefill(self) -> tuple[int, int]:
        """One chunked-prefill forward: (tokens prefilled, requests they belong to)."""
        batch = self._sched.batch
        start = batch.num_decode
        segments, sampling = prefill_inputs(batch.rows[start:], self.config.max_prefill_tokens)
        if not segments:
            return 0, 0
        ends = list(accumulate(len(s.token_ids) for s in segments))
        logits = self._runner.forward(start, segments, [e - 1 for e in ends])  # (M, V)
        choices, logprobs = (t.tolist() for t in choose_tokens(logits, sampling))
        for i, seg in enumerate(segments):
            state = batch.rows[start + i]
            self._count_prefill(state, len(seg.token_ids))
            state.cache_len += len(seg.token_ids)
            if state.cache_len == len(state.tokens):  # prefill complete: first new token
                batch.promote(start + i)
                reason = self._emit(state, [choices[i]], [logprobs[i]], 0)
                if reason is not None:
                    self._done.append((state, reason))
        return ends[-1], len(segments)

    def _emit(
        self, state: EngineRequest, tokens: list[int], lps: list[float], drafted: int
    ) -> FinishReason | None:
        n = len(tokens)
        accepted = n - 1 if drafted else 0
        state.cache_len = state.reserved = len(state.tokens) - 1 + n
        state.num_draft_tokens += drafted
        state.num_accepted_tokens += accepted
        self._counts["num_draft_tokens"] += drafted
        self._counts["num_accepted_tokens"] += accepted
        self._counts["num_generated_tokens"] += n
        self._deltas.append(
            StepDelta(state.request_id, tuple(tokens), tuple(lps), drafted, accepted)
        )
        return state.append(tokens, lps)

    def _count_prefill(self, state: EngineRequest, n: int) -> None:
        self._counts["num_prefill_tokens"] += n
        if state.is_recompute:
            self._counts["num_recomputed_tokens"] += n
        elif state.is_reprefill:
            self._counts["num_reprefilled_tokens"] += n

    def _finish_all(self) -> None:
        """End the rows that finished this step, decoding or prefilling, once both forwards
        have run, in the order they were admitted (so their results, and the parked KV's
        least-recently-used order, follow admission)."""
        for state, reason in sorted(self._done, key=lambda d: d[0].admitted_at):
            self._finish(self._sched.batch.slot_of(state), reason)

    def _finish(self, slot: int, reason: FinishReason) -> None:
        state = self._sched.batch.rows[slot]
        if reason == "chunk":
            kv = self._cache.park(slot, state.cache_len)
            self._sched.parked.put(state.request_id, ParkedEntry(list(state.tokens), kv))
        self._sched.batch.remove(slot)
        del self._by_id[state.request_id]
        self._finished.append(state.result(reason, self._version))

    def _measure_profile(self) -> StepProfile:
        cfg = self.config
        batches = [b for b in cfg.profile_batches if b <= cfg.max_batch] or [1]
        context = min(cfg.profile_context, self.max_seq_len - max(cfg.profile_draft_lens) - 1)
        return StepProfile.measure(
            self.model,
            batches,
            cfg.profile_draft_lens,
            max(context, 1),
            cfg.profile_repeats,
            self._runner.packed,
        )


def _as_state_dict(source: object) -> Mapping[str, torch.Tensor]:
    if isinstance(source, Mapping):
        return source
    if isinstance(source, str | PathLike):
        return load_state_dict(source)
    raise TypeError(f"weights must be a state dict or a safetensors path, got {type(source)}")
