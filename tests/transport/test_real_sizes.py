"""Real sizes on the wire: a rollout's tokens and logprobs travel as raw int32/float32
frames (not msgpack lists in the header), so 700 samples x 2,048 tokens (16.5 MiB as
lists, over the 16 MiB header limit) round-trip under the default limits; an oversized
message is refused where it is encoded, naming the message and the limit."""

from __future__ import annotations

from pathlib import Path

import anyio
import msgpack
import numpy as np
import pytest

from transport.codec import DEFAULT_LIMITS, PACKED_EXT, CodecLimits, decode, encode
from transport.errors import MessageTooLarge, ProtocolError
from transport.messages import (
    RolloutFinished,
    RolloutRecord,
    SampleResult,
    TrainSampleSpec,
    TrainStep,
)
from transport.sockets import SocketOptions, ZmqTransport

N, L = 700, 2048  # 16.5 MiB of tokens and logprobs as msgpack lists

RECORD = RolloutRecord(
    policy="p", num_instances=1, chunks=(), requests=(), instances=(), makespan_s=1.0
)


def _tokens(seed: int) -> tuple[tuple[int, ...], tuple[float, ...]]:
    rng = np.random.default_rng(seed)
    ids = rng.integers(0, 151_000, L, dtype=np.int32)
    lps = -rng.random(L, dtype=np.float32) * 5  # float32 values survive float32 exactly
    return tuple(ids.tolist()), tuple(lps.tolist())


@pytest.fixture(scope="module")
def finished() -> RolloutFinished:
    ids, lps = _tokens(0)
    samples = tuple(
        SampleResult(
            request_id=f"r{i}",
            group_id=f"g{i // 8}",
            prompt_id=f"p{i // 8}",
            index=i % 8,
            token_ids=ids,
            logprobs=lps,
            finish_reason="length",
            weight_versions=(3,),
            start_s=0.0,
            end_s=1.0,
        )
        for i in range(N)
    )
    return RolloutFinished(rollout_id="r", samples=samples, record=RECORD)


def _step(n: int) -> TrainStep:
    ids, lps = _tokens(1)
    sample = TrainSampleSpec(
        prompt_ids=ids[:64], completion_ids=ids, old_logprobs=lps, reward=1.0, group_id="g",
        weight_versions=(0,),
    )  # fmt: skip
    return TrainStep(iteration=0, samples=(sample,) * n)


def test_a_rollout_of_700_by_2048_tokens_round_trips_under_the_default_limits(
    finished: RolloutFinished,
) -> None:
    frames = encode(finished)
    assert len(frames[0]) < 1 << 20  # the header holds no token lists
    assert [memoryview(f).nbytes for f in frames[1:]] == [N * L * 4, N * L * 4]
    out = decode(frames, DEFAULT_LIMITS)
    assert isinstance(out, RolloutFinished)
    assert out == finished  # tuples of Python ints and floats again, bit-exact


@pytest.mark.anyio
async def test_a_train_step_of_700_by_2048_tokens_crosses_real_sockets(tmp_path: Path) -> None:
    step = _step(N)
    t = ZmqTransport(SocketOptions())  # the default limits on both sides
    try:
        pull = t.pull(f"ipc://{tmp_path}/ts", bind=True)
        push = t.push(f"ipc://{tmp_path}/ts")
        with anyio.fail_after(30):
            await push.send(step)
            got = await pull.recv()
    finally:
        t.close()
    assert got == step


def test_an_oversized_message_is_refused_at_encode_naming_it_and_the_limit(
    finished: RolloutFinished,
) -> None:
    with pytest.raises(MessageTooLarge, match=r"RolloutFinished: header of \d+ bytes exceeds "
                       r"max_header_bytes=65536"):  # fmt: skip
        encode(finished, CodecLimits(max_header_bytes=64 << 10))
    with pytest.raises(MessageTooLarge, match=r"TrainStep: frame 1 of \d+ bytes exceeds "
                       r"max_frame_bytes=1048576"):  # fmt: skip
        encode(_step(200), CodecLimits(max_frame_bytes=1 << 20))


@pytest.mark.anyio
async def test_a_socket_refuses_to_send_past_its_limits(tmp_path: Path) -> None:
    t = ZmqTransport(SocketOptions(limits=CodecLimits(max_frame_bytes=1 << 20)))
    try:
        push = t.push(f"ipc://{tmp_path}/big")
        with pytest.raises(MessageTooLarge, match=r"TrainStep.*max_frame_bytes"):
            await push.send(_step(200))
    finally:
        t.close()


def test_token_ids_must_fit_int32_and_be_ints() -> None:
    ok = _step(1).samples[0]
    for bad, match in (((2**31,), "completion_ids: token ids must fit int32"),
                       ((1.5,), "completion_ids: expected ints")):  # fmt: skip
        sample = TrainSampleSpec(**{**_fields(ok), "completion_ids": bad})
        with pytest.raises((ValueError, TypeError), match=match):
            encode(TrainStep(iteration=0, samples=(sample,)))


def _fields(s: TrainSampleSpec) -> dict[str, object]:
    return {n: getattr(s, n) for n in TrainSampleSpec.__dataclass_fields__}


def test_a_packed_array_outside_its_frame_is_a_protocol_error() -> None:
    header, *frames = encode(_step(1))
    body = msgpack.unpackb(header, strict_map_key=True)
    meta = msgpack.packb([0, "int32", 10, 10**6])  # past the end of the int32 frame
    body[2]["samples"][0]["completion_ids"] = msgpack.ExtType(PACKED_EXT, meta)
    with pytest.raises(ProtocolError, match="outside frame"):
        decode([msgpack.packb(body), *frames])


def test_logprobs_packed_into_a_token_field_are_a_protocol_error() -> None:
    header, *frames = encode(_step(1))
    body = msgpack.unpackb(header, strict_map_key=True)
    meta = msgpack.packb([1, "float32", 0, 4])  # frame 1 (after the header: 2) holds logprobs
    body[2]["samples"][0]["completion_ids"] = msgpack.ExtType(PACKED_EXT, meta)
    with pytest.raises(ProtocolError, match="completion_ids: expected ints"):
        decode([msgpack.packb(body), *frames])
