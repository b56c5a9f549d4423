"""SGLang's `/generate` contract as pure functions (SGLang >= 0.5.22; ../shared/SGLANG.md).

A chunk becomes one request body: `input_ids = prompt + generated`, a prefix-free `rid`
unique per chunk, `return_logprob`, and only `sampling_params` keys that SGLang 0.5.23's
schema allows (`SAMPLING_KEYS`): `max_new_tokens` clamped to the chunk budget, the
remaining total budget and the context; `top_k` off is omitted (SGLang refuses 0); one
`sampling_seed` per sample (a hash of the request id and the rollout seed, so siblings
differ). A response becomes a `ChunkResult`: tokens and logprobs from
`meta_info.output_token_logprobs` (a null or non-finite logprob is refused: it would
become a NaN in the trainer's loss), the finish reason mapped (`length` that used the chunk's
budget while the request has budget and context left is `chunk`), weight versions checked
and SGLang's own `spec_*` statistics kept. Nothing here does I/O.
"""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from actors.generator.engine import (
    ChunkRequest,
    ChunkResult,
    EngineLoad,
    FinishReason,
    check_chunk_request,
)
from actors.generator.errors import (
    ContextOverflowError,
    InvalidRequestError,
    ServerError,
    WeightVersionError,
)

# SGLang 0.5.23 `api_types.SamplingParams`: any other key is a 400 (e.g. `max_tokens`, `seed`)
SAMPLING_KEYS = frozenset(
    {
        "max_new_tokens", "stop", "stop_regex", "stop_token_ids", "temperature", "top_p",
        "top_k", "min_p", "frequency_penalty", "presence_penalty", "repetition_penalty",
        "min_new_tokens", "n", "json_schema", "regex", "ebnf", "structural_tag", "ignore_eos",
        "skip_special_tokens", "spaces_between_special_tokens", "no_stop_trim",
        "stream_interval", "logit_bias", "sampling_seed", "custom_params", "beam_width",
        "watermark", "choice",
    }
)  # fmt: skip
MAX_SEED = 2**63 - 1  # sampling_seed is an i64
# the routes this backend calls that SGLang 0.5.23 marks ADMIN_OPTIONAL (http_server.py)
ADMIN_ROUTES = frozenset(
    {
        "/abort_request", "/pause_generation", "/continue_generation", "/flush_cache",
        "/update_weights_from_disk", "/update_weight_version", "/init_weights_update_group",
        "/destroy_weights_update_group", "/begin_weight_update", "/end_weight_update",
        "/update_weights_from_distributed",
    }
)  # fmt: skip


def chunk_rid(request_id: str, serial: int) -> str:
    """`<request id>@<serial>#`: `#` appears once, at the end (the id's own `#` and `%` are
    escaped), so no rid is a prefix of another (SGLang aborts every rid that *starts with*
    the one given); the request id, and with it the group, stays readable."""
    escaped = request_id.replace("%", "%25").replace("#", "%23")
    return f"{escaped}@{serial}#"


def request_id_of(rid: str) -> str:
    """The request id a `chunk_rid` was made from."""
    escaped = rid.rstrip("#").rpartition("@")[0]
    return escaped.replace("%23", "#").replace("%25", "%")


def sampling_seed(request_id: str, seed: int | None) -> int:
    """A per-sample i64 seed: a hash of the request id and the rollout's seed (siblings share
    the seed but not the id, so their coins differ; a chunk resumed elsewhere keeps it)."""
    key = f"{seed}|{request_id}".encode()
    return int.from_bytes(hashlib.blake2b(key, digest_size=8).digest(), "little") & MAX_SEED


def stop_ids(request: ChunkRequest, eos_token_id: int | None) -> tuple[int, ...]:
    """The tokens that end this request, as the built-in engine counts them."""
    ids = list(request.params.stop_token_ids)
    if eos_token_id is not None and not request.params.ignore_eos and eos_token_id not in ids:
        ids.append(eos_token_id)
    return tuple(ids)


def validate_chunk(request: ChunkRequest, context_len: int, weight_version: int) -> None:
    """Refuse bad input before anything is sent (the same rules as the built-in engine)."""
    check_chunk_request(request)
    rid = request.request_id
    for tok in (*request.prompt_ids, *request.generated_ids, *request.params.stop_token_ids):
        if not isinstance(tok, int) or tok < 0:
            raise InvalidRequestError(f"request {rid!r}: token ids must be ints >= 0, got {tok!r}")
    n = request.num_context_tokens
    if n >= context_len:
        raise ContextOverflowError(
            f"request {rid!r} has {n} context tokens; the server's context holds {context_len} "
            f"including at least one new token"
        )
    expected = request.weight_version
    if expected is not None and expected != weight_version:
        raise WeightVersionError(
            f"request {rid!r} expects weight version {expected}; the server holds {weight_version}"
        )


def clamp_new_tokens(request: ChunkRequest, context_len: int) -> int:
    """min(chunk budget, total budget left, context left): SGLang refuses a request whose
    input plus `max_new_tokens` passes the context, so the client clamps (verl PR #7207)."""
    budget = min(request.max_chunk_tokens, context_len - request.num_context_tokens)
    if request.max_new_tokens is not None:
        budget = min(budget, request.max_new_tokens - len(request.generated_ids))
    return budget


def generate_body(
    request: ChunkRequest, rid: str, max_new_tokens: int, eos_token_id: int | None
) -> dict[str, Any]:
    """The `/generate` body of one chunk (token ids in, token ids and logprobs out)."""
    p = request.params
    sampling: dict[str, Any] = {
        "max_new_tokens": int(max_new_tokens),
        "temperature": float(p.temperature),
        "top_p": float(p.top_p),
        "ignore_eos": bool(p.ignore_eos),
        "stop_token_ids": list(stop_ids(request, eos_token_id)),
        "no_stop_trim": True,  # keep the stop token in output_ids, as the built-in engine does
        "skip_special_tokens": False,
        "spaces_between_special_tokens": False,
        "sampling_seed": sampling_seed(request.request_id, p.seed),
    }
    if p.top_k > 0:  # our 0 = off; SGLang's off is the key omitted (0 is a 400)
        sampling["top_k"] = int(p.top_k)
    return {
        "rid": rid,
        "input_ids": [*request.prompt_ids, *request.generated_ids],
        "sampling_params": sampling,
        "return_logprob": True,
        "stream": False,
    }


@dataclass(frozen=True, slots=True)
class SpecMeta:
    """SGLang's own speculative decoding statistics of one chunk (0 when it ran without)."""

    num_verify_steps: int = 0
    num_draft_tokens: int = 0
    num_accepted_tokens: int = 0


def error_message(status: int, body: bytes) -> str:
    """The server's message from an error response (`{"error": str}` from the contract gate,
    `{"error": {"message": str}}` elsewhere, or whatever text came)."""
    text = body.decode("utf-8", "replace")
    try:
        data = json.loads(text)
    except ValueError:
        return f"HTTP {status}: {text[:500]}"
    err = data.get("error") if isinstance(data, dict) else None
    if isinstance(err, dict):
        err = err.get("message")
    if isinstance(err, str):
        return f"HTTP {status}: {err}"
    return f"HTTP {status}: {text[:500]}"


def parse_version(value: object) -> int | None:
    """Our weight versions travel as decimal strings; anything else (SGLang's "default") is
    None."""
    if isinstance(value, str) and value.isdigit():
        return int(value)
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    return None


def _expect(cond: bool, what: str) -> None:
    if not cond:
        raise ServerError(f"malformed /generate response: {what}")


def _tokens(meta: Mapping[str, Any], body: Mapping[str, Any]) -> tuple[list[int], list[float]]:
    entries = meta.get("output_token_logprobs")
    ids = body.get("output_ids")
    if entries is None:  # an abort while queued may carry no logprobs
        _expect(ids is None or ids == [], "output_ids without output_token_logprobs")
        return [], []
    _expect(isinstance(entries, list), "output_token_logprobs is not a list")
    tokens: list[int] = []
    logprobs: list[float] = []
    for entry in entries:  # the messages are formatted only for a bad entry (hot loop)
        if not (isinstance(entry, list) and len(entry) == 3):
            _expect(False, f"logprob entry {entry!r}")
        lp, tok = entry[0], entry[1]
        if type(tok) is not int:  # bool is not a token id either
            _expect(isinstance(tok, int) and not isinstance(tok, bool), f"token id {tok!r}")
        if not isinstance(lp, int | float) or isinstance(lp, bool) or not math.isfinite(lp):
            _expect(False, f"logprob {lp!r} of output token {len(tokens)} (id {tok!r})")
        tokens.append(tok)
        logprobs.append(float(lp))
    if ids is not None:
        _expect(ids == tokens, "output_ids disagree with output_token_logprobs")
    return tokens, logprobs


def _versions(meta: Mapping[str, Any], held: int) -> set[int | None]:
    spans = meta.get("weight_versions")
    if isinstance(spans, list) and spans:
        return {parse_version(s.get("version")) if isinstance(s, dict) else None for s in spans}
    if "weight_version" in meta:
        return {parse_version(meta["weight_version"])}
    return {held}


def parse_generate(
    data: object,
    request: ChunkRequest,
    *,
    max_new_tokens: int,
    context_len: int,
    eos_token_id: int | None,
    weight_version: int,
) -> tuple[ChunkResult, SpecMeta]:
    """A `/generate` response as the chunk's result; `ServerError` when it is not one."""
    _expect(isinstance(data, dict), f"expected an object, got {type(data).__name__}")
    assert isinstance(data, dict)
    meta = data.get("meta_info")
    _expect(isinstance(meta, dict), "no meta_info object")
    assert isinstance(meta, dict)
    tokens, logprobs = _tokens(meta, data)
    _expect(len(tokens) <= max_new_tokens, f"{len(tokens)} tokens for max {max_new_tokens}")
    finish = meta.get("finish_reason")
    _expect(isinstance(finish, dict) and "type" in finish, f"finish_reason {finish!r}")
    assert isinstance(finish, dict)
    kind = finish["type"]
    _expect(kind in ("stop", "length", "abort"), f"finish_reason type {kind!r}")
    reason = _finish_reason(
        kind, tokens, logprobs, request, max_new_tokens, context_len, eos_token_id
    )
    versions = _versions(meta, weight_version)
    expected = request.weight_version if request.weight_version is not None else weight_version
    if versions != {expected}:
        raise WeightVersionError(
            f"request {request.request_id!r} expects weight version {expected}; the server "
            f"answered with {sorted(map(str, versions))}"
        )
    spec = SpecMeta(
        num_verify_steps=_int(meta, "spec_verify_ct"),
        num_draft_tokens=_int(meta, "spec_num_proposed_drafts"),
        num_accepted_tokens=_int(meta, "spec_num_correct_drafts"),
    )
    result = ChunkResult(
        request.request_id,
        tuple(tokens),
        tuple(logprobs),
        reason,
        expected,
        error=None,
        num_cached_tokens=_int(meta, "cached_tokens"),
        num_draft_tokens=spec.num_draft_tokens,
        num_accepted_tokens=spec.num_accepted_tokens,
    )
    return result, spec


def _int(meta: Mapping[str, Any], key: str) -> int:
    value = meta.get(key)
    return int(value) if isinstance(value, int | float) and not isinstance(value, bool) else 0


def _finish_reason(
    kind: str,
    tokens: list[int],
    logprobs: list[float],
    request: ChunkRequest,
    max_new_tokens: int,
    context_len: int,
    eos_token_id: int | None,
) -> FinishReason:
    """stop -> stop; abort -> abort; length -> length when the request has no budget or
    context left, else chunk. A stop token SGLang did not stop at (it ignores stop ids under
    `ignore_eos`) ends the chunk there, as the built-in engine would have."""
    stops = set(stop_ids(request, eos_token_id))
    for i, tok in enumerate(tokens):
        if tok in stops:
            del tokens[i + 1 :], logprobs[i + 1 :]
            return "stop"
    if kind == "stop":
        return "stop"
    if kind == "abort":
        return "abort"
    length = request.num_context_tokens + len(tokens)
    total = request.max_new_tokens
    if (
        len(tokens) < max_new_tokens  # the server's own limit, not our budget
        or length >= context_len
        or (total is not None and len(request.generated_ids) + len(tokens) >= total)
    ):
        return "length"
    return "chunk"


def sum_loads(data: object) -> tuple[int, int, int, int, int]:
    """(running, waiting, used tokens, max tokens, max running requests) summed over the
    ranks of `/v1/loads?include=core` (0.5.23 lists `loads[]`; older servers had an
    `aggregate` block)."""
    _expect(isinstance(data, dict), "/v1/loads: not an object")
    assert isinstance(data, dict)
    ranks = data.get("loads")
    _expect(isinstance(ranks, list), "/v1/loads: no loads list")
    assert isinstance(ranks, list)
    keys = (
        "num_running_reqs",
        "num_waiting_reqs",
        "num_used_tokens",
        "max_total_num_tokens",
        "max_running_requests",
    )
    sums = [0] * len(keys)
    for rank in ranks:
        _expect(isinstance(rank, dict), "/v1/loads: a rank is not an object")
        for i, k in enumerate(keys):
            sums[i] += _int(rank, k)
    return sums[0], sums[1], sums[2], sums[3], sums[4]


def engine_load(sums: Sequence[int], in_flight: int, max_running: int) -> EngineLoad:
    """Our `EngineLoad` from summed server loads and the chunks this client has in flight."""
    running, waiting, used, total, server_max = sums
    return EngineLoad(
        num_running=max(running, 0),
        num_waiting=max(waiting, in_flight - running, 0),
        num_parked=0,
        kv_tokens_used=used,
        kv_tokens_total=total,
        max_running=server_max or max_running or 1,
    )
