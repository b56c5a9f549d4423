"""The tiny generator model the pipeline integration tests run (fast on one CPU core)."""

from __future__ import annotations

from typing import Any

TINY_GENERATOR: dict[str, Any] = {
    "hidden": 64,
    "num_layers": 2,
    "num_heads": 4,
    "num_kv_heads": 2,
    "intermediate": 128,
    "max_context": 256,
    "max_batch": 8,
}
