"""Bytes on the wire: every message (messages/), one msgpack codec with tensor and array
frames (codec.py), typed async ZeroMQ sockets (sockets.py), in-process channels with the same
interface (inproc.py) and CURVE authentication (security.py).

The message types an embedding user handles are importable from here
(`from transport import SamplingSpec`); they load on first use (PEP 562 `__getattr__`), so
`import transport` stays cheap.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from transport.messages import (
        PROTOCOL_VERSION,
        ChunkRecord,
        Message,
        PromptSpec,
        RequestRecord,
        RolloutRecord,
        SampleResult,
        SamplingSpec,
        Struct,
        register_extension,
    )

__all__ = [
    "PROTOCOL_VERSION",
    "ChunkRecord",
    "Message",
    "PromptSpec",
    "RequestRecord",
    "RolloutRecord",
    "SampleResult",
    "SamplingSpec",
    "Struct",
    "register_extension",
]


def __getattr__(name: str) -> Any:
    if name not in __all__:
        raise AttributeError(f"module 'transport' has no attribute {name!r}")
    value = getattr(importlib.import_module("transport.messages"), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})
