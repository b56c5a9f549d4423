"""EngineConfig: the knobs of the built-in TorchEngine, validated once."""

from __future__ import annotations

from dataclasses import dataclass

PARKED_EVICTIONS = ("queue", "lru")


@dataclass(frozen=True, slots=True)
class EngineConfig:
    """``max_batch`` running slots; ``kv_budget_tokens`` KV tokens for running and parked
    requests together (never exceeded); ``max_seq_len`` caps a sequence (None = the
    model's context); ``max_prefill_tokens`` prefill tokens per step (chunked prefill);
    ``max_draft_tokens`` draft nodes per request per step; ``num_threads`` torch threads of
    this process (None = leave as is); ``profile`` measures step times at start-up (else on
    the first ``step_time`` call); ``parked_eviction``: which parked KV goes first when
    room is needed, "queue" (requests whose next chunk is not queued, least recently used;
    then the queued request that runs last) or "lru" (least recently used alone, which
    cascades when several chunks that ended together queue again behind a request that
    needs room: ``ParkedStore.evict``); ``packed_weights``: forwards of several tokens run
    their matmuls on fused copies of the weights in oneDNN's layout, rebuilt when the
    weights change (``actors.model.packed``: faster on CPU, one more copy of the weights in
    memory; no effect where torch lacks oneDNN or off the CPU).

    Memory: K/V slot buffers of ``(max_batch + 1) * max_seq_len`` tokens are preallocated
    (``ModelConfig.kv_bytes_per_token`` each); parked KV is copied out compactly. The token
    budget bounds what running and parked requests may use of them together."""

    max_batch: int = 32
    kv_budget_tokens: int = 32768
    max_seq_len: int | None = None
    max_prefill_tokens: int = 512
    max_draft_tokens: int = 16
    num_threads: int | None = None
    eos_token_id: int | None = None
    profile: bool = True
    profile_batches: tuple[int, ...] = (1, 4, 16, 32)
    profile_draft_lens: tuple[int, ...] = (0, 1, 2, 4, 8)
    profile_context: int = 128
    profile_repeats: int = 5
    parked_eviction: str = "queue"
    packed_weights: bool = True

    def __post_init__(self) -> None:
        for name in (
            "max_batch",
            "kv_budget_tokens",
            "max_prefill_tokens",
            "profile_context",
            "profile_repeats",
        ):
            if getattr(self, name) <= 0:
                raise ValueError(f"EngineConfig.{name} must be > 0, got {getattr(self, name)}")
        if self.parked_eviction not in PARKED_EVICTIONS:
            raise ValueError(
                f"EngineConfig.parked_eviction must be one of {PARKED_EVICTIONS}, "
                f"got {self.parked_eviction!r}"
            )
        if self.max_draft_tokens < 0:
            raise ValueError(
                f"EngineConfig.max_draft_tokens must be >= 0, got {self.max_draft_tokens}"
            )
        if self.max_seq_len is not None and self.max_seq_len < 2:
            raise ValueError(f"EngineConfig.max_seq_len must be >= 2, got {self.max_seq_len}")
        if self.num_threads is not None and self.num_threads <= 0:
            raise ValueError(f"EngineConfig.num_threads must be > 0, got {self.num_threads}")
        if not self.profile_batches or min(self.profile_batches) <= 0:
            raise ValueError("EngineConfig.profile_batches must be positive batch sizes")
        if not self.profile_draft_lens or min(self.profile_draft_lens) < 0:
            raise ValueError("EngineConfig.profile_draft_lens must be draft lengths >= 0")
