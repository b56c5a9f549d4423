"""The one codec: messages <-> lists of frames.

Frame 0 is a msgpack header `[PROTOCOL_VERSION, tag, {field: value}]`; every tensor in the
message becomes a msgpack extension (index, library, dtype, shape) in the header plus one
raw frame that aliases the tensor's memory (sent with `copy=False`, so no copy on send).
Fields marked `Packed` (`TokenIds`, `LogProbs`) travel the same way: the items of every
such field of a message are packed into one raw frame per dtype (int32 ids, float32
log-probabilities) and the header holds an extension (frame, dtype, offset, length) per
field, so a rollout's tokens never bloat the header; they decode back into tuples.
`encode` checks the header, every frame and the frame count against `CodecLimits` and
raises `MessageTooLarge` naming the message and the limit before anything is sent.
Decoding is strict and executes nothing from the wire: a wrong version, unknown tag, field
of the wrong type, dangling or unused tensor frame, or a frame over `CodecLimits` raises
`ProtocolError` naming the problem.

Torch is imported only when needed: a value can be a torch tensor only once torch is in
`sys.modules`, and decoding a torch tensor imports it (actors that carry no tensors never do).
"""

from __future__ import annotations

import functools
import math
import sys
import typing
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Final

import msgpack
import numpy as np
import zmq

from transport.errors import MessageTooLarge, ProtocolError
from transport.messages import PROTOCOL_VERSION, REGISTRY, Message, Packed, Struct
from transport.schema import Unpacked, compile_record, field_names

if TYPE_CHECKING:
    import torch

TENSOR_EXT: Final = 1
PACKED_EXT: Final = 2
_PACKED_DTYPES: Final = {"int32": np.dtype("int32"), "float32": np.dtype("float32")}
_INT32_RANGE: Final = (-(1 << 31), (1 << 31) - 1)
_INT: Final = frozenset([int])
_NUMBER: Final = frozenset([int, float])


def _names(kinds: set[type]) -> str:
    return "/".join(sorted(k.__name__ for k in kinds))


Frame = bytes | bytearray | memoryview | zmq.Frame

_WIRE_DTYPES: Final = (
    "float64",
    "float32",
    "float16",
    "int64",
    "int32",
    "int16",
    "int8",
    "uint8",
    "bool",
)
"""numpy and torch alike; torch adds bfloat16, which numpy has no type for."""
_NUMPY_DTYPES: Final = {name: np.dtype(name) for name in _WIRE_DTYPES}
_TORCH_DTYPE_NAMES: Final = frozenset((*_WIRE_DTYPES, "bfloat16"))


@functools.cache
def _import_torch() -> Any:
    """The torch module, imported on first use (decoding a torch tensor)."""
    import torch

    return torch


@functools.cache
def _torch_dtypes() -> dict[str, torch.dtype]:
    torch = _import_torch()
    return {name: getattr(torch, name) for name in _TORCH_DTYPE_NAMES}


@functools.cache
def _torch_names() -> dict[torch.dtype, str]:
    return {dtype: name for name, dtype in _torch_dtypes().items()}


@dataclass(frozen=True, slots=True, kw_only=True)
class CodecLimits:
    """Upper bounds enforced on every decoded message."""

    max_header_bytes: int = 16 << 20
    max_frame_bytes: int = 4 << 30
    max_frames: int = 4096

    def __post_init__(self) -> None:
        for name in ("max_header_bytes", "max_frame_bytes", "max_frames"):
            if getattr(self, name) <= 0:
                raise ValueError(f"CodecLimits.{name} must be positive")


DEFAULT_LIMITS: Final = CodecLimits()

# filled on first use, so messages registered later (`register_extension`) are carried too
_FIELDS: Final[dict[type, tuple[str, ...]]] = {}
_BUILDERS: Final[dict[int, Callable[..., Any]]] = {}
_PACKED: Final[dict[type, dict[str, str]]] = {}


def _packed(cls: type) -> dict[str, str]:
    """The `Packed` fields of a message or struct type, with their wire dtypes."""
    packed = _PACKED.get(cls)
    if packed is None:
        hints = typing.get_type_hints(cls, include_extras=True)
        packed = {}
        for name in field_names(cls):
            for meta in getattr(hints[name], "__metadata__", ()):
                if isinstance(meta, Packed):
                    if meta.dtype not in _PACKED_DTYPES:
                        raise TypeError(f"{cls.__name__}.{name}: cannot pack {meta.dtype}")
                    packed[name] = meta.dtype
        _PACKED[cls] = packed
    return packed


def _fields(cls: type[Message]) -> tuple[str, ...] | None:
    names = _FIELDS.get(cls)
    if names is None and REGISTRY.get(getattr(cls, "TAG", 0)) is cls:
        names = _FIELDS[cls] = field_names(cls)
        _packed(cls)
    return names


def _builder(tag: int) -> Callable[..., Any] | None:
    build = _BUILDERS.get(tag)
    if build is None and tag in REGISTRY:
        build = _BUILDERS[tag] = compile_record(REGISTRY[tag])
    return build


for _tag in list(REGISTRY):  # the built-in messages' schemas are checked at import
    _fields(REGISTRY[_tag])
    _builder(_tag)
_STRUCT_FIELDS: dict[type, tuple[str, ...]] = {}


class _Encoder:
    __slots__ = ("frames", "pools")

    def __init__(self) -> None:
        self.frames: list[Any] = []
        # dtype -> (frame index, arrays, items so far): one frame per dtype, filled at the end
        self.pools: dict[str, tuple[int, list[np.ndarray[Any, Any]], list[int]]] = {}

    def body(self, obj: Any, names: tuple[str, ...], where: str) -> dict[str, Any]:
        body = {n: getattr(obj, n) for n in names}
        for name, dtype in _packed(type(obj)).items():
            body[name] = self.pack(body[name], dtype, f"{where}.{name}")
        return body

    def pack(self, values: Any, dtype: str, where: str) -> Any:
        """An extension standing for `values`, whose items go to the `dtype` pool frame."""
        if not isinstance(values, np.ndarray | tuple | list):
            raise TypeError(f"{where}: expected a sequence of numbers, got {type(values).__name__}")
        if len(values) == 0:
            return ()
        arr = self._items(values, dtype, where)
        if arr.ndim != 1:
            raise TypeError(f"{where}: expected a flat sequence, got shape {arr.shape}")
        if dtype == "int32":
            if arr.dtype.kind not in "iu":
                raise TypeError(f"{where}: expected ints, got {arr.dtype.name} items")
            low, high = int(arr.min()), int(arr.max())
            if low < _INT32_RANGE[0] or high > _INT32_RANGE[1]:
                raise ValueError(f"{where}: token ids must fit int32, got {low}..{high}")
        elif arr.dtype.kind not in "fiu":
            raise TypeError(f"{where}: expected floats, got {arr.dtype.name} items")
        pool = self.pools.get(dtype)
        if pool is None:
            pool = self.pools[dtype] = (len(self.frames), [], [0])
            self.frames.append(b"")  # the pool's place, filled by `finish`
        index, arrays, count = pool
        offset = count[0]
        arrays.append(arr.astype(dtype, copy=False))
        count[0] += len(arr)
        return msgpack.ExtType(PACKED_EXT, msgpack.packb([index, dtype, offset, len(arr)]))

    @staticmethod
    def _items(values: Any, dtype: str, where: str) -> np.ndarray[Any, Any]:
        """`values` as an array; Python ints and floats checked by type first (in C)."""
        if isinstance(values, np.ndarray):
            return values
        kinds = set(map(type, values))
        if dtype == "int32":
            if not kinds <= _INT:
                raise TypeError(f"{where}: expected ints, got {_names(kinds - _INT)} items")
            return np.fromiter(values, np.int64, len(values))  # 4x np.asarray's speed
        if not kinds <= _NUMBER:
            raise TypeError(f"{where}: expected floats, got {_names(kinds - _NUMBER)} items")
        return np.array(values, dtype=np.float32)

    def finish(self) -> None:
        for index, arrays, _ in self.pools.values():
            joined = arrays[0] if len(arrays) == 1 else np.concatenate(arrays)
            self.frames[index] = np.ascontiguousarray(joined).view(np.uint8)

    def default(self, obj: Any) -> Any:
        if isinstance(obj, np.ndarray):
            return self._array(obj)
        torch = sys.modules.get("torch")  # without torch imported, nothing is a tensor
        if torch is not None and isinstance(obj, torch.Tensor):
            return self._tensor(obj)
        if isinstance(obj, Struct):
            names = _STRUCT_FIELDS.get(type(obj))
            if names is None:
                names = _STRUCT_FIELDS[type(obj)] = field_names(type(obj))
            return self.body(obj, names, type(obj).__name__)
        raise TypeError(f"cannot encode {type(obj).__name__} on the wire")

    def _array(self, a: np.ndarray[Any, Any]) -> msgpack.ExtType:
        name = a.dtype.name
        if name not in _NUMPY_DTYPES:
            raise TypeError(f"numpy dtype {name} is not supported on the wire")
        if not a.dtype.isnative:
            a = a.astype(a.dtype.newbyteorder("="))
        shape = a.shape  # ascontiguousarray turns 0-d arrays into 1-d ones
        flat = np.ascontiguousarray(a).reshape(-1)
        return self._frame(flat.view(np.uint8), "np", name, shape)

    def _tensor(self, t: torch.Tensor) -> msgpack.ExtType:
        name = _torch_names().get(t.dtype)
        if name is None:
            raise TypeError(f"torch dtype {t.dtype} is not supported on the wire")
        t = t.detach()
        if t.device.type != "cpu":
            t = t.cpu()
        t = t.contiguous()
        if t.numel() == 0:  # empty tensors may carry zero strides that forbid a byte view
            return self._frame(b"", "pt", name, tuple(t.shape))
        raw = t.reshape(-1).view(_import_torch().uint8).numpy()
        return self._frame(raw, "pt", name, tuple(t.shape))

    def _frame(self, raw: Any, lib: str, dtype: str, shape: tuple[int, ...]) -> msgpack.ExtType:
        self.frames.append(raw)
        meta = msgpack.packb([len(self.frames) - 1, lib, dtype, list(shape)])
        return msgpack.ExtType(TENSOR_EXT, meta)


def encode(msg: Message, limits: CodecLimits = DEFAULT_LIMITS) -> list[Any]:
    """Frames for `msg`: the header, then one buffer per tensor (aliasing its memory) and
    one per packed dtype. `MessageTooLarge` when a receiver with `limits` would refuse it."""
    cls = type(msg)
    names = _fields(cls)
    if names is None:
        raise TypeError(f"{cls.__name__} is not a registered message")
    enc = _Encoder()
    body = enc.body(msg, names, cls.__name__)
    header = msgpack.packb([PROTOCOL_VERSION, cls.TAG, body], default=enc.default)
    enc.finish()
    frames = [header, *enc.frames]
    _check_limits(cls.__name__, frames, limits)
    return frames


def _check_limits(name: str, frames: list[Any], limits: CodecLimits) -> None:
    if len(frames[0]) > limits.max_header_bytes:
        raise MessageTooLarge(
            f"{name}: header of {len(frames[0])} bytes exceeds max_header_bytes="
            f"{limits.max_header_bytes} (send large token lists as TokenIds/LogProbs or "
            "arrays, or split the message)"
        )
    if len(frames) > limits.max_frames:
        raise MessageTooLarge(f"{name}: {len(frames)} frames exceed max_frames={limits.max_frames}")
    for i, frame in enumerate(frames[1:], 1):
        size = frame.nbytes if isinstance(frame, np.ndarray | memoryview) else len(frame)
        if size > limits.max_frame_bytes:
            raise MessageTooLarge(
                f"{name}: frame {i} of {size} bytes exceeds max_frame_bytes="
                f"{limits.max_frame_bytes} (split the message)"
            )


class _Decoder:
    __slots__ = ("buffers", "used")

    def __init__(self, buffers: list[memoryview]) -> None:
        self.buffers = buffers
        self.used: list[bool | str] = [False] * len(buffers)

    def ext_hook(self, code: int, data: bytes) -> Any:
        if code == PACKED_EXT:
            return self._packed(data)
        if code != TENSOR_EXT:
            raise ProtocolError(f"unknown msgpack extension type {code}")
        try:
            index, lib, dtype, shape = msgpack.unpackb(data, use_list=False)
        except (ValueError, TypeError, msgpack.ExtraData) as exc:
            raise ProtocolError(f"malformed tensor header: {exc}") from None
        buf = self._take(index)
        if type(shape) is not tuple or not all(type(d) is int and d >= 0 for d in shape):
            raise ProtocolError(f"tensor {index}: bad shape {shape!r}")
        if lib == "np" and dtype in _NUMPY_DTYPES:
            return self._numpy(buf, _NUMPY_DTYPES[dtype], shape, index)
        if lib == "pt" and dtype in _TORCH_DTYPE_NAMES:
            return self._torch(buf, _torch_dtypes()[dtype], shape, index)
        raise ProtocolError(f"tensor {index}: unsupported {lib!r} dtype {dtype!r}")

    def _take(self, index: Any) -> memoryview:
        if type(index) is not int or not 0 <= index < len(self.buffers):
            raise ProtocolError(f"tensor refers to missing frame {index!r}")
        if self.used[index]:
            raise ProtocolError(f"tensor frame {index} referenced twice")
        self.used[index] = True
        return self.buffers[index]

    def _packed(self, data: bytes) -> Unpacked:
        try:
            index, dtype, offset, length = msgpack.unpackb(data, use_list=False)
        except (ValueError, TypeError, msgpack.ExtraData) as exc:
            raise ProtocolError(f"malformed packed-array header: {exc}") from None
        if type(index) is not int or not 0 <= index < len(self.buffers):
            raise ProtocolError(f"packed array refers to missing frame {index!r}")
        np_dtype = _PACKED_DTYPES.get(dtype) if type(dtype) is str else None
        if np_dtype is None:
            raise ProtocolError(f"packed array: unsupported dtype {dtype!r}")
        if self.used[index] not in (False, dtype):
            raise ProtocolError(f"frame {index} packs {dtype} and is used otherwise too")
        self.used[index] = dtype
        buf = self.buffers[index]
        items, rest = divmod(buf.nbytes, np_dtype.itemsize)
        if rest or type(offset) is not int or type(length) is not int:
            raise ProtocolError(f"packed array in frame {index}: bad frame size or bounds")
        if offset < 0 or length <= 0 or offset + length > items:
            raise ProtocolError(
                f"packed array [{offset}, {offset}+{length}) outside frame {index} of {items} items"
            )
        view = np.frombuffer(buf, dtype=np_dtype, count=length, offset=offset * np_dtype.itemsize)
        return Unpacked(view)

    @staticmethod
    def _check_size(buf: memoryview, itemsize: int, shape: tuple[int, ...], index: int) -> None:
        expected = math.prod(shape) * itemsize
        if buf.nbytes != expected:
            raise ProtocolError(
                f"tensor {index}: frame has {buf.nbytes} bytes, shape {shape} needs {expected}"
            )

    def _numpy(self, buf: memoryview, dtype: np.dtype[Any], shape: tuple[int, ...], i: int) -> Any:
        self._check_size(buf, dtype.itemsize, shape, i)
        return np.frombuffer(buf, dtype=dtype).reshape(shape)

    def _torch(self, buf: memoryview, dtype: torch.dtype, shape: tuple[int, ...], i: int) -> Any:
        self._check_size(buf, dtype.itemsize, shape, i)
        torch = _import_torch()
        if buf.nbytes == 0:
            return torch.empty(shape, dtype=dtype)
        if buf.readonly:
            buf = memoryview(bytearray(buf))
        return torch.frombuffer(buf, dtype=dtype).reshape(shape)


def _as_view(frame: Frame) -> memoryview:
    if isinstance(frame, zmq.Frame):
        return frame.buffer
    return memoryview(frame).cast("B")


def decode(frames: Sequence[Frame], limits: CodecLimits = DEFAULT_LIMITS) -> Message:
    """The message in `frames`, or `ProtocolError` naming what is wrong with them."""
    if not frames:
        raise ProtocolError("empty message: no frames")
    if len(frames) > limits.max_frames:
        raise ProtocolError(f"{len(frames)} frames exceed the limit of {limits.max_frames}")
    if len(frames) == 1:  # fast path: no tensors, so no extension may appear
        return _decode_header_only(frames[0], limits)
    views = [_as_view(f) for f in frames]
    if views[0].nbytes > limits.max_header_bytes:
        raise ProtocolError(
            f"header of {views[0].nbytes} bytes exceeds the limit of {limits.max_header_bytes}"
        )
    for i, view in enumerate(views[1:], 1):
        if view.nbytes > limits.max_frame_bytes:
            raise ProtocolError(
                f"frame {i} of {view.nbytes} bytes exceeds the limit of {limits.max_frame_bytes}"
            )
    dec = _Decoder(views[1:])
    header = _unpack_header(views[0], dec)
    if not all(dec.used):
        raise ProtocolError(f"{dec.used.count(False)} tensor frames not referenced by the header")
    return header


def _decode_header_only(frame: Frame, limits: CodecLimits) -> Message:
    raw = frame.bytes if isinstance(frame, zmq.Frame) else frame
    if len(raw) > limits.max_header_bytes:
        raise ProtocolError(
            f"header of {len(raw)} bytes exceeds the limit of {limits.max_header_bytes}"
        )
    return _unpack_header(raw, _NO_FRAMES)


def _reject_ext(code: int, data: bytes) -> Any:
    if code in (TENSOR_EXT, PACKED_EXT):
        raise ProtocolError("tensor refers to missing frame 0")
    raise ProtocolError(f"unknown msgpack extension type {code}")


class _NoFrames:
    ext_hook = staticmethod(_reject_ext)


_NO_FRAMES: Final = _NoFrames()


def _unpack_header(raw: Any, dec: _Decoder | _NoFrames) -> Message:
    try:
        obj = msgpack.unpackb(raw, ext_hook=dec.ext_hook, use_list=False, strict_map_key=True)
    except ProtocolError:
        raise
    except Exception as exc:  # msgpack raises several unrelated types for bad input
        raise ProtocolError(f"header is not valid msgpack: {type(exc).__name__}: {exc}") from None
    if type(obj) is not tuple or len(obj) != 3:
        raise ProtocolError("header must be [version, tag, body]")
    version, tag, body = obj
    if version != PROTOCOL_VERSION:
        raise ProtocolError(f"protocol version {version!r}, expected {PROTOCOL_VERSION}")
    build = _builder(tag) if type(tag) is int else None
    if build is None:
        raise ProtocolError(f"unknown message tag {tag!r}")
    msg: Message = build(body)
    return msg
