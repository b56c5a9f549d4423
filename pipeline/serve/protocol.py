"""SGLang 0.5.23's ``/generate`` on the wire: requests checked and parsed, responses built.

``parse_generate(body, ...)`` turns a JSON body into one ``GenerateSpec`` per request (a
batch when ``input_ids`` is a list of lists). Two kinds of refusal, as SGLang answers them:
``ContractError`` for what SGLang's JSON contract gate refuses (an unknown
``sampling_params`` key, ``max_new_tokens: 8.0``, a string where an int belongs), sent as
400 ``{"error": "<text>"}``; ``RequestError`` for what its request validation refuses
(``top_k: 0``, context overflow, empty input) and for SGLang features this server does not
implement (stop strings, grammars, penalties, ``n > 1``, input logprobs), sent as 400
``{"error": {"message": "<text>"}}``.

``response_json(...)`` builds one response object (``text``, ``output_ids``, ``meta_info``
with ``finish_reason`` objects, ``output_token_logprobs`` 3-tuples, ``weight_version`` and
``weight_versions`` spans); a request aborted while queued gets SGLang's queued-abort shape
(no ``prompt_tokens``). Pure functions, no I/O.
"""

from __future__ import annotations

import dataclasses
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from actors.generator import SamplingParams
from actors.generator.builtin.sampler import request_seed
from actors.model import ByteTokenizer

TOP_K_OFF = 1 << 30  # SGLang 0.5.23's schema default: top-k off
GREEDY_BELOW = 1e-6  # SGLang: temperature below this samples greedily

INT_KEYS = frozenset(
    {"max_new_tokens", "top_k", "min_new_tokens", "n", "stream_interval", "sampling_seed"}
    | {"beam_width"}
)
FLOAT_KEYS = frozenset(
    {"temperature", "top_p", "min_p", "frequency_penalty", "presence_penalty"}
    | {"repetition_penalty"}
)
BOOL_KEYS = frozenset(
    {"ignore_eos", "skip_special_tokens", "spaces_between_special_tokens", "no_stop_trim"}
)
OTHER_KEYS = frozenset(
    {"stop", "stop_regex", "stop_token_ids", "json_schema", "regex", "ebnf", "structural_tag"}
    | {"logit_bias", "custom_params", "watermark", "choice"}
)
SAMPLING_KEYS = INT_KEYS | FLOAT_KEYS | BOOL_KEYS | OTHER_KEYS
# keys SGLang accepts whose non-default values this server does not implement
UNSUPPORTED_IF_SET: dict[str, Any] = {
    "min_p": 0.0,
    "frequency_penalty": 0.0,
    "presence_penalty": 0.0,
    "repetition_penalty": 1.0,
    "min_new_tokens": 0,
    "n": 1,
    "beam_width": None,
    "stop": None,
    "stop_regex": None,
    "json_schema": None,
    "regex": None,
    "ebnf": None,
    "structural_tag": None,
    "watermark": None,
}


class ContractError(ValueError):
    """What SGLang's JSON contract gate refuses: 400 ``{"error": text}``."""


class RequestError(ValueError):
    """What SGLang's request validation refuses, or a feature not implemented here:
    400 ``{"error": {"message": text}}``."""


@dataclass(frozen=True, slots=True)
class GenerateSpec:
    """One request of a ``/generate`` body, checked."""

    rid: str
    input_ids: tuple[int, ...]
    max_new_tokens: int
    params: SamplingParams
    return_logprob: bool = False
    return_text_in_logprobs: bool = False
    skip_special_tokens: bool = True
    return_prompt_token_ids: bool = False


@dataclass(slots=True)
class Output:
    """What one request has produced so far (the handler's accumulator)."""

    token_ids: list[int] = field(default_factory=list)
    logprobs: list[float] = field(default_factory=list)
    spans: list[tuple[str, int]] = field(default_factory=list)  # (version, start index)
    finish_reason: dict[str, Any] | None = None
    is_queued_abort: bool = False
    num_cached_tokens: int = 0
    num_retractions: int = 0

    def note_version(self, version: str) -> None:
        """The weights changed to ``version`` before the next token."""
        start = len(self.token_ids)
        if self.spans and self.spans[-1][1] == start:
            self.spans.pop()  # no token came from the previous version
        if not self.spans or self.spans[-1][0] != version:
            self.spans.append((version, start))


def parse_generate(
    body: Any, *, context_len: int, vocab_size: int, max_input_len: int | None = None
) -> tuple[list[GenerateSpec], bool, bool]:
    """(requests, is_batch, stream) of a ``/generate`` body. ``max_input_len``: SGLang's
    ``max_req_input_len``, the scheduler's bound on an input (checked after the context)."""
    if not isinstance(body, dict):
        raise ContractError(f"invalid type: {_kind(body)}, expected a map")
    if body.get("text") is not None:
        raise RequestError("seer serve takes input_ids only (it has no text tokenizer)")
    _check_unsupported_top_level(body)
    ids = body.get("input_ids")
    if ids is None:
        raise RequestError("Either text or input_ids should be provided.")
    if not isinstance(ids, list):
        raise ContractError(f"input_ids: invalid type: {_kind(ids)}, expected a sequence")
    is_batch = bool(ids) and isinstance(ids[0], list)
    batch = ids if is_batch else [ids]
    n = len(batch)
    rids = _per_request(body.get("rid"), n, is_batch, "rid")
    params = _per_request(body.get("sampling_params"), n, is_batch, "sampling_params")
    logprob = _per_request(body.get("return_logprob"), n, is_batch, "return_logprob")
    stream = _expect(body.get("stream", False) or False, bool, "stream")
    in_text = _expect(body.get("return_text_in_logprobs") or False, bool, "return_text_in_logprobs")
    with_prompt = _expect(
        body.get("return_prompt_token_ids", False), bool, "return_prompt_token_ids"
    )
    limits = (context_len, vocab_size, max_input_len)
    specs = [
        dataclasses.replace(
            _one_spec(batch[i], rids[i], params[i], logprob[i], in_text, *limits),
            return_prompt_token_ids=with_prompt,
        )
        for i in range(n)
    ]
    if len({s.rid for s in specs}) != len(specs):
        raise RequestError("rid values of a batch must be distinct")
    return specs, is_batch, stream


def _check_unsupported_top_level(body: Mapping[str, Any]) -> None:
    start = body.get("logprob_start_len")
    if start is not None and start != -1:
        raise RequestError("seer serve returns no input logprobs: logprob_start_len must be -1")
    if body.get("top_logprobs_num") or body.get("token_ids_logprob"):
        raise RequestError("seer serve returns no top logprobs (top_logprobs_num, ...)")
    if body.get("return_hidden_states") or body.get("lora_path"):
        raise RequestError("seer serve supports neither hidden states nor LoRA adapters")


def _per_request(value: Any, n: int, is_batch: bool, name: str) -> list[Any]:
    """One value per request: a list of ``n`` values, or one value shared by all."""
    if isinstance(value, list):
        if len(value) != n:
            raise RequestError(f"{name} has {len(value)} entries for {n} request(s)")
        return list(value)
    if is_batch and name == "rid" and value is not None:
        raise RequestError("a batch of input_ids needs a list of rids (or none)")
    return [value] * n


def _one_spec(
    ids: Any,
    rid: Any,
    sampling: Any,
    return_logprob: Any,
    in_text: bool,
    context_len: int,
    vocab_size: int,
    max_input_len: int | None = None,
) -> GenerateSpec:
    tokens = _token_ids(ids, vocab_size)
    rid = uuid.uuid4().hex if rid is None else _expect(rid, str, "rid")
    sp = _sampling(sampling)
    max_new = sp.get("max_new_tokens", 128)
    if max_new is None:
        max_new = 128
    if max_new < 0:
        raise RequestError(f"max_new_tokens must be at least 0, got {max_new}.")
    _check_context(len(tokens), max_new, context_len)
    if max_input_len is not None and len(tokens) >= max_input_len:  # the scheduler's check
        raise RequestError(
            f"Input length ({len(tokens)} tokens) exceeds the maximum allowed length "
            f"({max_input_len} tokens). Use a shorter input or enable --allow-auto-truncate."
        )
    return GenerateSpec(
        rid=rid,
        input_ids=tokens,
        max_new_tokens=max_new,
        params=_engine_params(sp, rid, vocab_size),
        return_logprob=bool(_expect(return_logprob or False, bool, "return_logprob")),
        return_text_in_logprobs=in_text,
        skip_special_tokens=sp.get("skip_special_tokens", True) is not False,
    )


def _token_ids(ids: Any, vocab_size: int) -> tuple[int, ...]:
    if not isinstance(ids, list):
        raise ContractError(f"input_ids: invalid type: {_kind(ids)}, expected a sequence")
    for tok in ids:
        if not _is_int(tok):
            raise ContractError(f"input_ids: invalid type: {_kind(tok)}, expected i64")
    if not ids:
        raise RequestError("input_ids is empty: the prompt needs at least one token")
    bad = [t for t in ids if not 0 <= t < vocab_size]
    if bad:
        raise RequestError(f"token id {bad[0]} is out of vocabulary (size {vocab_size})")
    return tuple(ids)


def _sampling(raw: Any) -> dict[str, Any]:
    if raw is None:
        return {}
    if not isinstance(raw, dict):
        raise ContractError(f"sampling_params: invalid type: {_kind(raw)}, expected a map")
    for key, value in raw.items():
        if key not in SAMPLING_KEYS:
            listed = ", ".join(f"`{k}`" for k in sorted(SAMPLING_KEYS))
            raise ContractError(f"unknown field `{key}`, expected one of {listed}")
        if value is None:
            continue
        if key in INT_KEYS and not _is_int(value):
            raise ContractError(f"{key}: invalid type: {_kind(value)}, expected i64")
        if key in FLOAT_KEYS and not (_is_int(value) or isinstance(value, float)):
            raise ContractError(f"{key}: invalid type: {_kind(value)}, expected f64")
        if key in BOOL_KEYS and not isinstance(value, bool):
            raise ContractError(f"{key}: invalid type: {_kind(value)}, expected a boolean")
    for key, default in UNSUPPORTED_IF_SET.items():
        if raw.get(key, default) not in (default, None):
            raise RequestError(f"seer serve does not implement sampling_params.{key}")
    if raw.get("logit_bias") or raw.get("choice"):
        raise RequestError("seer serve does not implement logit_bias or choice")
    return {k: v for k, v in raw.items() if v is not None}


def _engine_params(sp: Mapping[str, Any], rid: str, vocab_size: int) -> SamplingParams:
    temperature = float(sp.get("temperature", 1.0))
    top_p = float(sp.get("top_p", 1.0))
    top_k = int(sp.get("top_k", TOP_K_OFF))
    if temperature < 0:
        raise RequestError(f"temperature must be non-negative, got {temperature}.")
    if not 0 < top_p <= 1:
        raise RequestError(f"top_p must be in (0, 1], got {top_p}.")
    if top_k < -1 or top_k == 0:
        raise RequestError(f"top_k must be -1 (disable) or at least 1, got {top_k}.")
    stops = sp.get("stop_token_ids") or []
    if not isinstance(stops, list) or not all(_is_int(t) for t in stops):
        raise ContractError("stop_token_ids: invalid type, expected a sequence of i64")
    seed = sp.get("sampling_seed")
    return SamplingParams(
        temperature=0.0 if temperature < GREEDY_BELOW else temperature,
        top_k=0 if top_k == -1 or top_k >= vocab_size else top_k,
        top_p=top_p,
        seed=request_seed(rid, seed),
        ignore_eos=bool(sp.get("ignore_eos", False)),
        stop_token_ids=tuple(t for t in stops if 0 <= t < vocab_size),
    )


def _check_context(num_input: int, max_new: int, context_len: int) -> None:
    if num_input >= context_len:
        raise RequestError(
            f"The input ({num_input} tokens) is longer than the model's context length "
            f"({context_len} tokens)."
        )
    if num_input + max_new > context_len:
        raise RequestError(
            f"Requested token count exceeds the model's maximum context length of "
            f"{context_len} tokens. You requested a total of {num_input + max_new} tokens: "
            f"{num_input} tokens from the input messages and {max_new} tokens for the "
            f"completion. Please reduce the number of tokens in the input messages or the "
            f"completion to fit within the limit."
        )


def _expect(value: Any, kind: type, name: str) -> Any:
    if not isinstance(value, kind):
        raise ContractError(f"{name}: invalid type: {_kind(value)}, expected {kind.__name__}")
    return value


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _kind(value: Any) -> str:
    if isinstance(value, bool):
        return f"boolean `{str(value).lower()}`"
    if isinstance(value, int):
        return f"integer `{value}`"
    if isinstance(value, float):
        return f"floating point `{value!r}`"
    if isinstance(value, str):
        return f"string {value!r}"
    names = {list: "sequence", dict: "map", type(None): "null"}
    return names.get(type(value), type(value).__name__)


# ---- responses ---------------------------------------------------------------------------


def stop_reason(matched: int) -> dict[str, Any]:
    return {"type": "stop", "matched": matched}


def length_reason(length: int) -> dict[str, Any]:
    return {"type": "length", "length": length}


def abort_reason(message: str, *, is_queued: bool = False) -> dict[str, Any]:
    """SGLang's ``FINISH_ABORT``; a request aborted while queued gets the short form."""
    if is_queued:
        return {"type": "abort", "message": message}
    return {"type": "abort", "message": message, "status_code": None, "err_type": None}


def response_json(
    spec: GenerateSpec,
    out: Output,
    *,
    latency_s: float,
    tokenizer: ByteTokenizer | None,
    index: int | None = None,
    since: int = 0,
) -> dict[str, Any]:
    """One ``/generate`` response object, or a stream frame while ``out.finish_reason`` is
    None. ``since``: the tokens already streamed (SGLang's ``--incremental-streaming-output``
    sends only the tokens after them, and slices the logprobs to match); 0 = cumulative."""
    n = len(out.token_ids)
    new_ids, new_lps = out.token_ids[since:], out.logprobs[since:]
    meta: dict[str, Any] = {
        "id": spec.rid,
        "finish_reason": out.finish_reason,
        "completion_tokens": n,
        "cached_tokens": out.num_cached_tokens,
        "weight_version": out.spans[-1][0] if out.spans else None,
        "weight_versions": _spans(out.spans, n),
        "num_retractions": out.num_retractions,
        "e2e_latency": latency_s,
    }
    if not out.is_queued_abort:
        meta["prompt_tokens"] = len(spec.input_ids)
    if spec.return_logprob:
        texts: Sequence[str | None] = (
            [_text(tokenizer, [t], False) for t in new_ids]
            if spec.return_text_in_logprobs
            else [None] * len(new_ids)
        )
        meta["output_token_logprobs"] = [
            [lp, tok, txt] for lp, tok, txt in zip(new_lps, new_ids, texts, strict=True)
        ]
        meta["input_token_logprobs"] = []
    body: dict[str, Any] = {
        "text": _text(tokenizer, new_ids, spec.skip_special_tokens),
        "output_ids": list(new_ids),
        "meta_info": meta,
    }
    if spec.return_prompt_token_ids:
        body["prompt_token_ids"] = list(spec.input_ids)
    if index is not None:
        body["index"] = index
    return body


def _spans(spans: Sequence[tuple[str, int]], n: int) -> list[dict[str, Any]]:
    ends = [start for _, start in spans[1:]] + [n]
    return [{"version": v, "start": s, "end": e} for (v, s), e in zip(spans, ends, strict=True)]


def _text(tokenizer: ByteTokenizer | None, ids: Sequence[int], skip_special: bool) -> str:
    if tokenizer is None:
        return ""
    return tokenizer.decode(ids, render_specials=not skip_special)


def error_body(exc: ValueError) -> dict[str, Any]:
    """SGLang's 400 body for a refused request."""
    if isinstance(exc, ContractError):
        return {"error": str(exc)}
    return {"error": {"message": str(exc)}}
