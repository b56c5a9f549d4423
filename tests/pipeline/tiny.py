"""The tiny generator model the pipeline integration tests run (fast on one CPU core)."""

from __future__ import annotations

from typing import Any

TINY_MODEL: dict[str, Any] = {
    "hidden": 64,
    "num_layers": 2,
    "num_heads": 4,
    "num_kv_heads": 2,
    "intermediate": 128,
    "max_context": 256,
}
TINY_GENERATOR: dict[str, Any] = {"model": TINY_MODEL, "max_batch": 8}
