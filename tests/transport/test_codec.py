from __future__ import annotations

import dataclasses
import types
import typing
from typing import Any

import msgpack
import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from tests.conftest import assert_same
from transport.codec import CodecLimits, decode, encode
from transport.errors import ProtocolError
from transport.messages import (
    PROTOCOL_VERSION,
    REGISTRY,
    Array,
    Message,
    Packed,
    Ping,
    Struct,
    TensorBlob,
    TorchTensor,
    register_extension,
)


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class Part(Struct):
    index: int
    values: Array


@register_extension(2001)
@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class Parts(Message):
    """A message defined outside the product's registry, as an example or a user would."""

    batch_id: int
    parts: tuple[Part, ...]
    matrix: Array


_NP_DTYPES = ["float32", "float64", "int32", "int64", "uint8", "bool"]


def _arrays() -> st.SearchStrategy[Any]:
    shapes = hnp.array_shapes(min_dims=0, max_dims=3, min_side=0, max_side=4)
    np_arrays = st.sampled_from(_NP_DTYPES).flatmap(
        lambda d: hnp.arrays(
            np.dtype(d),
            shapes,
            elements=None if d != "float64" else st.floats(allow_nan=False, width=64),
        )
    )
    return st.one_of(np_arrays, np_arrays.map(torch.from_numpy))


_PACKED_ITEMS = {
    "int32": st.integers(-(2**31), 2**31 - 1),
    "float32": st.floats(allow_nan=False, width=32),
}


def strategy_for(tp: Any) -> st.SearchStrategy[Any]:
    origin, args = typing.get_origin(tp), typing.get_args(tp)
    packed = [m for m in getattr(tp, "__metadata__", ()) if isinstance(m, Packed)]
    if packed:  # token ids and logprobs travel as int32 / float32
        return st.lists(_PACKED_ITEMS[packed[0].dtype], max_size=4).map(tuple)
    simple = {
        int: st.integers(-(2**63), 2**64 - 1),
        float: st.floats(allow_nan=False),
        str: st.text(max_size=20),
        bytes: st.binary(max_size=20),
        bool: st.booleans(),
        type(None): st.none(),
    }
    if tp in simple:
        return simple[tp]
    if origin in (types.UnionType, typing.Union):
        if any(a is torch.Tensor or a is TorchTensor for a in args):
            return _arrays()
        return st.one_of(*(strategy_for(a) for a in args))
    if origin is tuple:
        return st.lists(strategy_for(args[0]), max_size=4).map(tuple)
    if origin is dict:
        return st.dictionaries(st.text(max_size=8), strategy_for(args[1]), max_size=4)
    if origin is typing.Literal:
        return st.sampled_from(args)
    if isinstance(tp, type) and issubclass(tp, Struct):
        return messages_of(tp)
    raise AssertionError(f"no strategy for {tp!r}")


def messages_of(cls: type) -> st.SearchStrategy[Any]:
    hints = typing.get_type_hints(cls, include_extras=True)
    return st.builds(cls, **{f.name: strategy_for(hints[f.name]) for f in dataclasses.fields(cls)})


@pytest.mark.parametrize("cls", list(REGISTRY.values()), ids=lambda c: c.__name__)
@settings(max_examples=40, deadline=None)
@given(data=st.data())
def test_every_registered_message_round_trips(cls: type, data: st.DataObject) -> None:
    msg = data.draw(messages_of(cls))
    assert_same(decode(encode(msg)), msg)


@pytest.mark.parametrize(
    "dtype", [torch.float32, torch.bfloat16, torch.int32, torch.int64, torch.float16, torch.bool]
)
@pytest.mark.parametrize("shape", [(), (0,), (7,), (3, 5), (2, 3, 4), (1, 1, 1, 9)])
def test_torch_tensors_round_trip_bit_exactly(dtype: torch.dtype, shape: tuple[int, ...]) -> None:
    gen = torch.Generator().manual_seed(1)
    t = (torch.randn(shape, generator=gen) * 1000).to(dtype)
    out = decode(encode(TensorBlob(name="t", tensor=t)))
    assert isinstance(out, TensorBlob)
    assert_same(out.tensor, t)


@pytest.mark.parametrize("dtype", ["float32", "int32", "int64", "float64"])
def test_numpy_arrays_round_trip_including_views(dtype: str) -> None:
    base = np.arange(60, dtype=dtype).reshape(3, 4, 5)
    view = base[:, ::2, 1:]  # not contiguous: encoded as a contiguous copy
    out = decode(encode(TensorBlob(name="v", tensor=view)))
    assert isinstance(out, TensorBlob)
    assert_same(out.tensor, np.ascontiguousarray(view))


def test_tensor_frames_alias_the_senders_memory() -> None:
    t = torch.arange(1024, dtype=torch.float32)
    frames = encode(TensorBlob(name="t", tensor=t))
    assert len(frames) == 2
    assert np.shares_memory(frames[1], t.numpy())


def test_nested_records_and_tensors_in_an_extension_message() -> None:
    parts = (Part(index=0, values=torch.ones(2, 3)), Part(index=1, values=np.zeros(4)))
    msg = Parts(batch_id=4, parts=parts, matrix=torch.eye(3))
    assert REGISTRY[2001] is Parts and Parts.TAG == 2001
    assert_same(decode(encode(msg)), msg)


def test_extension_tags_are_checked() -> None:
    with pytest.raises(TypeError, match=r"1024\.\.65535"):
        register_extension(30)(Parts)
    with pytest.raises(TypeError, match=r"taken by tests\.transport\.test_codec\.Parts"):

        @register_extension(2001)
        @dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
        class Clash(Message):
            seq: int

    with pytest.raises(TypeError, match="frozen, slotted"):

        @register_extension(2002)
        @dataclasses.dataclass(kw_only=True)
        class Loose(Message):
            seq: int


def _header(body: Any, tag: int = Ping.TAG, version: int = PROTOCOL_VERSION) -> bytes:
    return msgpack.packb([version, tag, body])


@pytest.mark.parametrize(
    ("frames", "needle"),
    [
        ([], "empty"),
        ([b"\xc1garbage"], "not valid msgpack"),
        ([msgpack.packb([PROTOCOL_VERSION, Ping.TAG, {"seq": 1}])[:-2]], "not valid msgpack"),
        ([_header({"seq": 1}, tag=999)], "unknown message tag 999"),
        ([_header({"seq": 1}, version=PROTOCOL_VERSION + 1)], "protocol version"),
        ([_header({"seq": "one"})], "Ping.seq: expected int, got str"),
        ([_header({})], "missing fields ['seq']"),
        ([_header({"seq": 1, "evil": 2})], "unexpected"),
        ([msgpack.packb({"not": "a list"})], "header must be"),
        ([_header({"seq": 1}), b"stray frame"], "not referenced"),
    ],
)
def test_malformed_messages_are_refused_with_a_named_problem(
    frames: list[bytes], needle: str
) -> None:
    with pytest.raises(ProtocolError, match=None) as info:
        decode(frames)
    assert needle in str(info.value)


def test_tensor_header_problems_are_refused() -> None:
    frames = encode(TensorBlob(name="t", tensor=torch.ones(4, 4)))
    with pytest.raises(ProtocolError, match="bytes"):
        decode([frames[0], bytes(frames[1])[:-4]])  # truncated tensor frame
    with pytest.raises(ProtocolError, match="missing frame"):
        decode([frames[0]])
    bad = msgpack.packb(
        [
            PROTOCOL_VERSION,
            TensorBlob.TAG,
            {
                "name": "t",
                "tensor": msgpack.ExtType(1, msgpack.packb([0, "pt", "complex64", [1]])),
            },
        ]
    )
    with pytest.raises(ProtocolError, match="unsupported"):
        decode([bad, b"\0" * 8])
    unknown_ext = msgpack.packb([PROTOCOL_VERSION, Ping.TAG, {"seq": msgpack.ExtType(7, b"")}])
    with pytest.raises(ProtocolError, match="extension type 7"):
        decode([unknown_ext])


def test_oversized_frames_are_refused() -> None:
    limits = CodecLimits(max_header_bytes=64, max_frame_bytes=1024, max_frames=3)
    with pytest.raises(ProtocolError, match="header of"):
        decode(encode(Ping(seq=1, payload=b"x" * 100)), limits)
    big = encode(TensorBlob(name="b", tensor=torch.zeros(1024)))
    with pytest.raises(ProtocolError, match="frame 1 of 4096 bytes exceeds"):
        decode(big, limits)
    with pytest.raises(ProtocolError, match="frames exceed"):
        decode([b"x"] * 4, limits)


def test_pickle_payloads_are_never_executed() -> None:
    import pickle

    with pytest.raises(ProtocolError):
        decode([pickle.dumps(object())])


def test_limits_must_be_positive() -> None:
    with pytest.raises(ValueError, match="max_frames"):
        CodecLimits(max_frames=0)
