"""What `Rollout` checks before a rollout or a publication leaves the driver.

Bad input fails here, at once, with a typed error naming the prompt and the field, rather
than in an actor (where it used to kill every generator, or come back as samples of 0
tokens whose reason was only in a log). `RolloutInputError` (a `ValueError`) is the base:
`InvalidPromptError` for a prompt (its id, its tokens: not integers, negative, outside the
vocabulary, longer than the context or the KV budget; its forced lengths),
`InvalidSamplingError` for a `SamplingSpec` field, `InvalidEpisodeError` for an
`EpisodeSpec` field (or episodes without an environment actor in the topology); an empty
prompt list and a group size below 1 raise the base class.

`GeneratorModel` is what the driver knows of the generators' model from the topology's
options, read without loading a tensor: the vocabulary, the context and the KV budget to
check prompts against and the `WeightSpec` to check a publication against. Each is None
where the driver cannot know it: a generator kind of the user's own, an SGLang server's
context (the server reports it at run time), a model path that is not on this host.
"""

from __future__ import annotations

import dataclasses
import functools
import math
import operator
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

import torch

from actors.generator.options import GeneratorOptions
from actors.model.config import ModelConfig
from actors.model.weight_spec import WeightSpec, model_shape
from pipeline.config import ConfigError, PipelineConfig, build_options
from transport.messages import EpisodeSpec, PromptSpec, SamplingSpec

_INT64 = range(-(2**63), 2**63)


class RolloutInputError(ValueError):
    """A rollout's input is invalid; nothing was sent."""


class InvalidPromptError(RolloutInputError):
    """A prompt (named by id and position) has an invalid field."""


class InvalidSamplingError(RolloutInputError):
    """A `SamplingSpec` field is invalid."""


class InvalidEpisodeError(RolloutInputError):
    """An `EpisodeSpec` field is invalid, or the topology cannot run episodes."""


def check_episode(episode: EpisodeSpec, config: PipelineConfig) -> None:
    """`InvalidEpisodeError` naming the first bad field of a multi-turn episode spec."""
    module, _, attr = episode.environment.partition(":")
    if not module or not attr:
        raise InvalidEpisodeError(
            f"EpisodeSpec.environment must be an import path 'package.module:factory', "
            f"got {episode.environment!r}"
        )
    for name, least in (("max_turns", 1), ("max_turn_tokens", 0), ("max_observation_tokens", 0)):
        value = getattr(episode, name)
        if isinstance(value, bool) or not isinstance(value, int) or value < least:
            raise InvalidEpisodeError(
                f"EpisodeSpec.{name} must be an int >= {least}, got {value!r}"
            )
    if episode.observation_cut not in ("left", "right"):
        raise InvalidEpisodeError(
            "EpisodeSpec.observation_cut must be 'left' or 'right', "
            f"got {episode.observation_cut!r}"
        )
    if not any(g.role == "environment" for g in config.topology.actors):
        raise InvalidEpisodeError(
            "multi-turn episodes need an 'environment' actor in the topology "
            "(rollout_config(environments=N))"
        )


@dataclass(frozen=True)
class GeneratorModel:
    """What the driver can check against (None: not known here; see the module).
    `shape`: the model's config and dtype, from which `weight_spec` is built when a
    publication is first checked (building it imports torch's compiler: seconds)."""

    vocab_size: int | None = None
    max_context: int | None = None  # prompt and output, in tokens
    kv_budget_tokens: int | None = None
    shape: tuple[ModelConfig, torch.dtype] | None = None

    @functools.cached_property
    def weight_spec(self) -> WeightSpec | None:
        return None if self.shape is None else WeightSpec.of_config(*self.shape)

    @classmethod
    def of(cls, config: PipelineConfig) -> GeneratorModel:
        """The generators' model as the topology's options describe it."""
        try:
            group = config.topology.group("generator")
            if group.kind != "generator":  # the user's own actor: its model is its own
                return cls()
            where = "topology.actors.generator.options"
            opts: GeneratorOptions = build_options(GeneratorOptions, group.options, where)
        except ConfigError:
            return cls()  # the launcher says what is wrong with the topology
        model = opts.model
        if model.path and not Path(model.path).exists():
            return cls()  # on the generators' hosts, not this one
        if opts.backend != "builtin" and not model.path:
            return cls()  # a server's own model: not described by these options
        try:
            shape, dtype = model_shape(model)
        except (ValueError, OSError):
            return cls()  # the generators refuse it at start, with the reason
        if opts.backend != "builtin":  # the server decides its context and KV
            return cls(vocab_size=shape.vocab_size, shape=(shape, dtype))
        return cls(shape.vocab_size, shape.max_context, opts.kv_budget_tokens, (shape, dtype))


def prompt_specs(prompts: Sequence[Sequence[int] | PromptSpec]) -> tuple[PromptSpec, ...]:
    """`prompts` as `PromptSpec`s (a plain sequence of token ids becomes prompt "p<i>"),
    with each token id an int (`InvalidPromptError` naming the one that is not)."""
    items = _items(prompts, "prompts must be a list of prompts (token-id lists)")
    if not items:
        raise RolloutInputError("prompts is empty: give at least one prompt")
    return tuple(_prompt_spec(i, p) for i, p in enumerate(items))


def _items(values: object, message: str) -> list[object]:
    if isinstance(values, str | bytes) or not isinstance(values, Iterable):
        raise RolloutInputError(f"{message}, got a {type(values).__name__}")
    try:
        return list(values)
    except TypeError:  # iterable in name only (a 0-d tensor)
        raise RolloutInputError(f"{message}, got a {type(values).__name__}") from None


def _prompt_spec(i: int, prompt: object) -> PromptSpec:
    spec = prompt if isinstance(prompt, PromptSpec) else None
    name = f"prompt {i} ({spec.prompt_id!r})" if spec is not None else f"prompt {i}"
    ids = spec.token_ids if spec is not None else prompt
    try:
        items = _items(ids, f"{name}: token_ids must be a sequence of ints")
    except RolloutInputError as exc:
        raise InvalidPromptError(str(exc)) from None
    tokens = []
    for j, token in enumerate(items):
        try:
            if isinstance(token, bool):
                raise TypeError
            tokens.append(operator.index(token))  # type: ignore[arg-type]
        except TypeError:
            raise InvalidPromptError(
                f"{name}: token_ids[{j}] is {token!r}, not an int token id"
            ) from None
    if spec is None:
        return PromptSpec(prompt_id=f"p{i}", token_ids=tuple(tokens))
    return dataclasses.replace(spec, token_ids=tuple(tokens))


def check_prompts(
    specs: Sequence[PromptSpec], group_size: int, sampling: SamplingSpec, model: GeneratorModel
) -> None:
    """`RolloutInputError` for the first bad prompt, group size or sampling field."""
    if isinstance(group_size, bool) or not isinstance(group_size, int) or group_size < 1:
        raise RolloutInputError(f"group_size must be an int >= 1, got {group_size!r}")
    check_sampling(sampling, model)
    seen: dict[str, int] = {}
    for i, p in enumerate(specs):
        name = f"prompt {i} ({p.prompt_id!r})"
        if not isinstance(p.prompt_id, str) or not p.prompt_id:
            raise InvalidPromptError(f"prompt {i}: prompt_id must be a non-empty string")
        if p.prompt_id in seen:
            raise InvalidPromptError(f"{name}: prompt_id repeats prompt {seen[p.prompt_id]}'s")
        seen[p.prompt_id] = i
        _check_tokens(name, p.token_ids, model)
        if p.forced_lens and (
            len(p.forced_lens) != group_size or any(n < 1 for n in p.forced_lens)
        ):
            raise InvalidPromptError(
                f"{name}: forced_lens must hold one length >= 1 per sample ({group_size}), "
                f"got {p.forced_lens}"
            )


def _check_tokens(name: str, ids: Sequence[int], model: GeneratorModel) -> None:
    if not ids:
        raise InvalidPromptError(f"{name}: token_ids is empty")
    vocab = model.vocab_size
    for j, token in enumerate(ids):
        if token < 0 or (vocab is not None and token >= vocab):
            where = f"[0, {vocab})" if vocab is not None else "[0, vocab_size)"
            raise InvalidPromptError(
                f"{name}: token_ids[{j}] = {token} is outside the vocabulary {where}"
            )
    if model.max_context is not None and len(ids) >= model.max_context:
        raise InvalidPromptError(
            f"{name}: token_ids has {len(ids)} tokens; the generators' context holds "
            f"{model.max_context}, prompt and at least one new token"
        )
    budget = model.kv_budget_tokens
    if budget is not None and len(ids) + 1 > budget:
        raise InvalidPromptError(
            f"{name}: token_ids has {len(ids)} tokens; a generator's KV budget "
            f"(kv_budget_tokens) holds {budget} tokens, prompt and at least one new token"
        )


def check_sampling(sampling: SamplingSpec, model: GeneratorModel) -> None:
    """`InvalidSamplingError` naming the first invalid field of `sampling`."""
    if not isinstance(sampling, SamplingSpec):
        kind = type(sampling).__name__
        raise InvalidSamplingError(f"sampling must be a SamplingSpec, got a {kind}")
    s = sampling

    def refuse(field: str, rule: str) -> None:
        value = getattr(s, field)
        raise InvalidSamplingError(f"SamplingSpec.{field} must be {rule}, got {value!r}")

    if not _is_number(s.temperature) or not (math.isfinite(s.temperature) and s.temperature >= 0):
        refuse("temperature", "a finite number >= 0 (0 = greedy)")
    if not _is_int(s.top_k) or s.top_k < 0:
        refuse("top_k", "an int >= 0 (0 = off)")
    if not _is_number(s.top_p) or not 0 < s.top_p <= 1:
        refuse("top_p", "a number in (0, 1] (1 = off)")
    if s.seed is not None and (not _is_int(s.seed) or s.seed not in _INT64):
        refuse("seed", "None or a 64-bit signed int")
    if not _is_int(s.max_new_tokens) or s.max_new_tokens < 1:
        refuse("max_new_tokens", "an int >= 1")
    if not isinstance(s.ignore_eos, bool):
        refuse("ignore_eos", "a bool")
    vocab = model.vocab_size
    for token in s.stop_token_ids:
        if not _is_int(token) or token < 0 or (vocab is not None and token >= vocab):
            refuse("stop_token_ids", f"token ids in [0, {vocab or 'vocab_size'})")


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _is_number(value: object) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)
