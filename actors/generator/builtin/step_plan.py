"""Checks and plans that precede a step: request validation and draft planning.

``validate_request`` raises the typed ``EngineError`` for every bad input the issue lists
(empty prompt, prompt longer than the context, non-positive max tokens, out-of-vocabulary
token, bad sampling params, wrong weight version). ``plan_drafts`` validates the caller's
drafts (raising ``DraftError`` before anything runs), keeps those of requests that decode
this step, and trims each to what can still be used (context room, chunk budget).
``trim_drafts`` removes draft nodes, largest drafts first, when the KV budget is short.
``decode_inputs`` and ``prefill_inputs`` lay out a step's forward inputs.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence

from actors.generator.builtin.draft_tree import DraftTree, validate_draft
from actors.generator.builtin.request import EngineRequest
from actors.generator.builtin.runner import Segment
from actors.generator.builtin.sampler import SamplingBatch
from actors.generator.engine import ChunkRequest, Draft, check_chunk_request
from actors.generator.errors import (
    ContextOverflowError,
    TokenOutOfVocabError,
    WeightVersionError,
)


def validate_request(
    request: ChunkRequest, vocab_size: int, max_seq_len: int, kv_budget: int, weight_version: int
) -> None:
    check_chunk_request(request)
    rid = request.request_id
    _check_vocab(rid, "prompt", request.prompt_ids, vocab_size)
    _check_vocab(rid, "generated", request.generated_ids, vocab_size)
    _check_vocab(rid, "stop", request.params.stop_token_ids, vocab_size)
    n = request.num_context_tokens
    if n >= max_seq_len:
        raise ContextOverflowError(
            f"request {rid!r} has {n} context tokens; the context holds {max_seq_len} "
            f"including at least one new token"
        )
    if n + 1 > kv_budget:
        raise ContextOverflowError(
            f"request {rid!r} needs {n + 1} KV tokens; the engine's KV budget is {kv_budget}"
        )
    expected = request.weight_version
    if expected is not None and expected != weight_version:
        raise WeightVersionError(
            f"request {rid!r} expects weight version {expected}; engine holds {weight_version}"
        )


def _check_vocab(rid: str, what: str, ids: Iterable[int], vocab_size: int) -> None:
    for i, tok in enumerate(ids):
        if not 0 <= tok < vocab_size:
            raise TokenOutOfVocabError(
                f"request {rid!r}: {what} token {tok} at index {i} is outside [0, {vocab_size})"
            )


def plan_drafts(
    drafts: Mapping[str, Draft] | None,
    decoding: Sequence[EngineRequest],
    vocab_size: int,
    max_tokens: int,
    max_seq_len: int,
) -> dict[str, DraftTree]:
    if not drafts:
        return {}
    trees = {rid: validate_draft(d, vocab_size, max_tokens) for rid, d in drafts.items()}
    planned: dict[str, DraftTree] = {}
    for state in decoding:
        tree = trees.get(state.request_id)
        if tree is None:
            continue
        room = min(max_seq_len - len(state.tokens), state.budget_left - 1)
        if room > 0 and tree.num_nodes > 0:
            planned[state.request_id] = tree.truncated(room)
    return planned


def trim_drafts(trees: dict[str, DraftTree], excess: int) -> dict[str, DraftTree]:
    """Remove ``excess`` draft nodes (or all), taking from the largest drafts first."""
    trees = dict(trees)
    while excess > 0 and trees:
        rid = max(trees, key=lambda r: trees[r].num_nodes)
        tree = trees[rid]
        cut = min(excess, max(1, tree.num_nodes // 2))
        excess -= cut
        if cut >= tree.num_nodes:
            del trees[rid]
        else:
            trees[rid] = tree.truncated(tree.num_nodes - cut)
    return trees


def decode_inputs(
    rows: Sequence[EngineRequest], trees: Mapping[str, DraftTree]
) -> tuple[list[Segment], SamplingBatch]:
    """One segment per decoding row (its last token, then its draft as a tree whose nodes
    sit at ``cache_len + depth``) and the sampling parameters of every segment token."""
    segments: list[Segment] = []
    temp: list[float] = []
    top_k: list[int] = []
    top_p: list[float] = []
    seeds: list[int] = []
    positions: list[int] = []
    for state in rows:
        ctx, tree = state.cache_len, trees.get(state.request_id)
        if tree is None:
            seg = Segment(ctx, [state.tokens[-1]], [ctx])
        else:
            seg = Segment(
                ctx,
                [state.tokens[-1], *tree.token_ids],
                [ctx + d for d in tree.depths],
                None if tree.is_chain else tree.mask,
            )
        segments.append(seg)
        params, n = state.request.params, len(seg.token_ids)
        temp += [params.temperature] * n
        top_k += [params.top_k] * n
        top_p += [params.top_p] * n
        seeds += [state.seed] * n
        positions += [q + 1 for q in seg.positions]  # each logit row picks the next token
    return segments, SamplingBatch.build(temp, top_k, top_p, seeds, positions)


def prefill_inputs(
    rows: Sequence[EngineRequest], max_tokens: int
) -> tuple[list[Segment], SamplingBatch]:
    """Prefill pieces for the leading prefilling ``rows`` within ``max_tokens`` (only the
    last piece may stop short), and the sampling parameters for their last tokens."""
    segments: list[Segment] = []
    for state in rows:
        if max_tokens <= 0:
            break
        ctx = state.cache_len
        n = min(len(state.tokens) - ctx, max_tokens)
        segments.append(Segment(ctx, state.tokens[ctx : ctx + n], list(range(ctx, ctx + n))))
        max_tokens -= n
    states = rows[: len(segments)]
    sampling = SamplingBatch.build(
        [s.request.params.temperature for s in states],
        [s.request.params.top_k for s in states],
        [s.request.params.top_p for s in states],
        [s.seed for s in states],
        [len(s.tokens) for s in states],
    )
    return segments, sampling
