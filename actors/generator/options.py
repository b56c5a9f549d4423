"""GeneratorOptions: one generator's engine backend, model and speculation settings; the
engine backends by name (`BACKENDS`), each built from a config of its own made here.

An engine never sees these options: the built-in `TorchEngine` takes its `EngineConfig`
(`GeneratorOptions.engine_config`), the `SGLangEngine` its `SGLangOptions` and model. A
backend's builder takes the options and the generator's index (which server of a list it
drives) and returns an `Engine` polled in a step loop (builtin) or a `RemoteEngine` whose
chunks are awaited concurrently (sglang); it imports its heavy dependencies only when called.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from actors.drafts.options import SpecConfig
from actors.generator.builtin.config import PARKED_EVICTIONS, EngineConfig
from actors.generator.sglang.options import SGLangOptions
from actors.model.options import ModelOptions
from actors.options import check, check_choice, check_positive

if TYPE_CHECKING:
    from actors.generator.engine import Engine, RemoteEngine


@dataclass(frozen=True, kw_only=True)
class GeneratorOptions:
    """`backend`: the engine, by name (`actors.generator.options.BACKENDS`). `model`: the
    policy (a TOML sub-table). `max_batch`: requests decoding at once (built-in engine;
    with SGLang, the scheduler's cap of chunks in flight per server). `kv_budget_tokens`:
    KV tokens for running and parked requests together (built-in engine; never exceeded:
    requests wait or are preempted). `max_prefill_tokens`: prefill tokens per engine step
    (chunked prefill). `num_threads`: torch threads of the generator process.
    `eos_token_id`: the token that ends a sample (None: none; `seer run` sets the task's).
    `profile`: measure the built-in engine's step times at start-up rather than at the
    first draft budget. `pin_cores` (built-in engine): generator i runs on `num_threads`
    cores of its own (`actors.generator.cpus`), as a GPU host gives each instance its own
    device; the benches and `seer sim validate` pin. `parked_eviction` (built-in engine):
    which parked KV goes first when room is needed ("queue" or "lru"; `seer bench
    eviction` compares them). `spec`: speculation (a TOML sub-table). `sglang`: the SGLang
    servers of backend "sglang" (a TOML sub-table)."""

    backend: str = "builtin"
    model: ModelOptions = field(default_factory=ModelOptions)
    max_batch: int = 32
    kv_budget_tokens: int = 32768
    max_prefill_tokens: int = 512
    num_threads: int = 1
    eos_token_id: int | None = None
    profile: bool = False
    pin_cores: bool = False
    parked_eviction: str = "queue"
    spec: SpecConfig = field(default_factory=SpecConfig)
    sglang: SGLangOptions = field(default_factory=SGLangOptions)

    def __post_init__(self) -> None:
        check_choice(self, "backend", BACKENDS)
        check_positive(self, "max_batch", "kv_budget_tokens", "max_prefill_tokens", "num_threads")
        eos = self.eos_token_id
        check(
            eos is None or 0 <= eos < self.model.vocab_size,
            "GeneratorOptions.eos_token_id",
            f"a token id below vocab_size {self.model.vocab_size}",
            eos,
        )
        check_choice(self, "parked_eviction", PARKED_EVICTIONS)
        check(
            self.parked_eviction == "queue" or self.backend == "builtin",
            "GeneratorOptions.parked_eviction",
            '"queue" unless backend is builtin (SGLang servers keep their own cache)',
            self.parked_eviction,
        )
        check(
            not self.pin_cores or self.backend == "builtin",
            "GeneratorOptions.pin_cores",
            "false unless backend is builtin (SGLang servers place themselves)",
            self.pin_cores,
        )

    def engine_config(self) -> EngineConfig:
        """The built-in engine's own config, from these options."""
        return EngineConfig(
            max_batch=self.max_batch,
            kv_budget_tokens=self.kv_budget_tokens,
            max_prefill_tokens=self.max_prefill_tokens,
            num_threads=self.num_threads,
            eos_token_id=self.eos_token_id,
            profile=self.profile,
            parked_eviction=self.parked_eviction,
        )


def _builtin(options: GeneratorOptions, index: int) -> Engine:
    from actors.generator.builtin import build_torch_engine

    return build_torch_engine(options.model, options.engine_config())


def _sglang(options: GeneratorOptions, index: int) -> RemoteEngine:
    from actors.extras import require

    require("aiohttp", extra="sglang", feature="the generator backend 'sglang'")
    from actors.generator.sglang.engine import SGLangEngine

    return SGLangEngine(
        options.sglang,
        options.model,
        index,
        eos_token_id=options.eos_token_id,
        max_batch=options.max_batch,
    )


BACKENDS: dict[str, Callable[[GeneratorOptions, int], Engine | RemoteEngine]] = {
    "builtin": _builtin,
    "sglang": _sglang,
}


def build_engine(options: GeneratorOptions, index: int = 0) -> Engine | RemoteEngine:
    """The engine `options.backend` names (options are validated: the name exists), for
    generator `index`."""
    return BACKENDS[options.backend](options, index)
