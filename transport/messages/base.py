"""The bases of every wire message: `Message`, `Struct` (records nested in messages) and
`Array` (tensors), and the protocol version.

Each message is a frozen, slotted, kw-only dataclass whose fields are msgpack-native
(int, float, str, bytes, bool, None, tuples, str-keyed dicts, nested `Struct` records) or
tensors (numpy arrays, torch tensors), which travel as raw frames. Fields hold ids, never
object references. The messages themselves live beside this module, one module per link
(which actors talk); `transport.messages.registry` maps each wire tag to its type.
Every envelope carries `PROTOCOL_VERSION`.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from typing import TYPE_CHECKING, Annotated, Any, ClassVar, Final, TypeAlias, TypeVar

import numpy as np

if TYPE_CHECKING:
    import torch

PROTOCOL_VERSION: Final = 2  # 2: token and log-probability arrays as frames (TokenIds, LogProbs)


class _TorchTensorType(type):
    def __instancecheck__(cls, obj: object) -> bool:
        torch = sys.modules.get("torch")  # no tensor exists before torch is imported
        return torch is not None and isinstance(obj, torch.Tensor)


class TorchTensor(metaclass=_TorchTensorType):
    """Stands for `torch.Tensor` in `Array` at run time, so that importing the transport
    does not import torch (seconds per process; the actors that need no tensors never do).
    `isinstance(x, TorchTensor)` is true for torch tensors; never instantiated."""


if TYPE_CHECKING:
    Array: TypeAlias = np.ndarray[Any, Any] | torch.Tensor
else:
    Array = np.ndarray[Any, Any] | TorchTensor
"""A numpy array or CPU torch tensor; travels as a msgpack header plus one raw frame.
(For type checkers `torch.Tensor`; at run time the `TorchTensor` marker, see above.)"""


@dataclass(frozen=True, slots=True)
class Packed:
    """Marks a `tuple[int, ...]` / `tuple[float, ...]` field whose items travel packed as
    `dtype` in a raw frame beside the header (one frame per dtype per message), not as a
    msgpack list; the field still reads as a tuple on both sides."""

    dtype: str


TokenIds: TypeAlias = Annotated[tuple[int, ...], Packed("int32")]
"""Token ids: a tuple of ints that travels as int32 in a raw frame."""
LogProbs: TypeAlias = Annotated[tuple[float, ...], Packed("float32")]
"""Log-probabilities: a tuple of floats that travels as float32 in a raw frame."""


class Message:
    """Base of every wire message; subclasses are registered in `REGISTRY`."""

    __slots__ = ()
    TAG: ClassVar[int]


M = TypeVar("M", bound=Message)


class Struct:
    """Base of records nested inside messages (encoded as maps, validated on decode)."""

    __slots__ = ()
