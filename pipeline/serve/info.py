"""ServerInfo: what ``seer serve`` tells about itself (``/model_info``, ``/server_info``)."""

from __future__ import annotations

from dataclasses import dataclass

API_VERSION = "0.5.23"  # the SGLang release whose API this server speaks


@dataclass(frozen=True, slots=True)
class ServerInfo:
    model_path: str
    host: str
    port: int
    context_len: int
    vocab_size: int
    max_batch: int
    kv_budget_tokens: int
    max_prefill_tokens: int
    eos_token_id: int | None
    kv_bytes_per_token: int = 0
    weight_bytes: int = 0
    incremental_streaming_output: bool = False
    tp_size: int = 1  # intra-op threads: the CPU analogue of tensor parallelism
    # SGLANG_HEALTH_CHECK_TIMEOUT: how long /health_generate waits for the engine's output
    health_check_timeout_s: float = 20.0
    context_length: int | None = None  # --context-length as given (SGLang reports null if not)

    @property
    def max_req_input_len(self) -> int:
        """SGLang 0.5.23's scheduler bound on an input (``TpModelWorker.get_worker_info``):
        ``min(context - 1, KV capacity - 1) - 5``."""
        return min(self.context_len - 1, self.kv_budget_tokens - 1) - 5
