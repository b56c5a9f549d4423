"""Fuzzed endpoints (issue 15 part 4): malformed frames at every actor kind's inbox.

`fuzz_actors(frames_per_actor)` is the entry point for benchmarks (the `"fuzz"` entry of
`seer bench faults` calls it): it launches a real topology as local processes (splitter,
estimator, scheduler, a built-in generator on a tiny model, the draft-tree store, a
trainer), runs a reference rollout, sends `frames_per_actor` malformed frames to each
actor's inbox over a raw ZeroMQ DEALER, checks every actor is still alive and answering,
runs the same rollout again and compares. It returns

    {"frames": total frames sent, "actor_crashes": actors dead or mute afterwards,
     "error_replies": ErrorReply answers to frames sent as calls, "missing_replies": calls
     left unanswered, "calls": frames sent as calls, "outputs_match": bool,
     "by_kind": {frame kind: frames sent}, "seconds": wall time}

Frame kinds (`KINDS`): truncated msgpack, random bytes, wrong field types, huge claimed
lengths, unknown tags, wrong protocol version, valid messages at the wrong actor,
tensors whose header claims more than their frame holds, wrong frame counts, broken
tensor headers. Half the frames are sent as calls (a correlation id): each must be
answered with `ErrorReply` (kind "ProtocolError" or "Unhandled"); the rest are one-way
and must be dropped. Frames come from `make_case(kind, rnd, role)` with a seeded
`random.Random`, so a run is reproducible; the property-based test draws them with
hypothesis instead.
"""

from __future__ import annotations

import dataclasses
import random
import secrets
import struct
import tempfile
import time
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

import anyio
import msgpack
import numpy as np
import zmq
import zmq.asyncio

from pipeline.config import ActorGroup, PipelineConfig, Topology
from pipeline.launch import Cluster
from transport.codec import TENSOR_EXT, decode, encode
from transport.errors import TransportError
from transport.messages import (
    PROTOCOL_VERSION,
    REGISTRY,
    Ack,
    EndRollout,
    ErrorReply,
    EstimateUpdated,
    GetLiveGenerators,
    GetLoad,
    GroupsClosed,
    GroupsOpened,
    LoadCheckpoint,
    Message,
    Ping,
    Pong,
    PromptBatch,
    PromptSpec,
    RequestFinished,
    SamplingSpec,
    SaveCheckpoint,
    SyncDrafts,
    TensorBlob,
    TokensAppended,
    TrainStep,
    WeightsPublished,
)

KINDS: Final = (
    "truncated",
    "random_bytes",
    "wrong_types",
    "huge_lengths",
    "unknown_tag",
    "wrong_version",
    "wrong_actor",
    "oversized_tensor",
    "frame_count",
    "bad_tensor_header",
)

# what each actor kind handles besides Stop/Ping/GetStats (nothing here may be sent to it)
HANDLED: Final[Mapping[str, frozenset[str]]] = {
    "splitter": frozenset({"PromptBatch"}),
    "estimator": frozenset({"GroupsOpened", "RequestFinished"}),
    "scheduler": frozenset(
        {
            "RequestsAdded",
            "ChunkFinished",
            "EstimateUpdated",
            "WeightsPublished",
            "GetLiveGenerators",
        }
    ),
    "generator": frozenset({"ChunkAssigned", "EndRollout", "WeightsBucket", "GetLoad"}),
    "drafts": frozenset({"GroupsOpened", "TokensAppended", "SyncDrafts", "GroupsClosed"}),
    "trainer": frozenset({"TrainStep", "TrainSamples", "SaveCheckpoint", "LoadCheckpoint"}),
}

_SAMPLES: Final[tuple[Message, ...]] = (
    PromptBatch(rollout_id="fz", prompts=(PromptSpec(prompt_id="p", token_ids=(1,)),),
                group_size=1, sampling=SamplingSpec()),
    GroupsOpened(rollout_id="fz", groups=(), generation_limit=4),
    RequestFinished(rollout_id="fz", group_id="g", request_id="r", output_len=1),
    EstimateUpdated(rollout_id="fz", group_id="g", estimate=3),
    WeightsPublished(version=0),
    GetLiveGenerators(),
    EndRollout(rollout_id="fz", request_ids=("r",)),
    GetLoad(),
    TokensAppended(appends=()),
    SyncDrafts(groups=()),
    GroupsClosed(rollout_id="fz", group_ids=("g",)),
    TrainStep(iteration=0, samples=()),
    SaveCheckpoint(path="/nonexistent/fuzz", iteration=0),
    LoadCheckpoint(path="/nonexistent/fuzz"),
    Ack(),
    Pong(seq=1, payload=b""),
    ErrorReply(kind="x", detail="y"),
)  # fmt: skip
_WRONG_VALUES: Final[tuple[Any, ...]] = (
    None, "x", -1, 2**63, 1.5, (), {}, b"\x00\xff", True, ("a", 1), {"k": [1, 2]}, -(2**63),
)  # fmt: skip


@dataclass(frozen=True, slots=True)
class FuzzCase:
    """Frames for one inbox (after the correlation frame) and whether to send as a call."""

    kind: str
    frames: tuple[bytes, ...]
    is_call: bool


def make_case(kind: str, rnd: random.Random, role: str) -> FuzzCase:
    """One malformed (or misdirected) message of `kind` for an actor of `role`."""
    frames = _FRAMES[kind](rnd, role)
    if kind != "wrong_actor":  # the one kind that decodes: it must stay undecodable
        _check_undecodable(frames)
    return FuzzCase(kind, tuple(frames), rnd.random() < 0.5)


def _check_undecodable(frames: Sequence[bytes]) -> None:
    try:
        decode(frames)
    except Exception:
        return
    raise AssertionError("a malformed frame decoded")  # the generator itself is wrong


def _valid_header(rnd: random.Random) -> bytes:
    return bytes(encode(rnd.choice(_SAMPLES))[0])


def _truncated(rnd: random.Random, role: str) -> list[bytes]:
    header = _valid_header(rnd)
    return [header[: rnd.randrange(0, len(header))]]


def _random_bytes(rnd: random.Random, role: str) -> list[bytes]:
    n = rnd.choice((0, 1, 2, 7, 64, 1000))
    frames = [rnd.randbytes(n)]
    if rnd.random() < 0.3:
        frames.append(rnd.randbytes(rnd.randrange(0, 64)))
    # a random byte string can be valid msgpack by chance (e.g. a bare int): still malformed
    return frames if not _decodes(frames) else [b"\xc1"]


def _decodes(frames: Sequence[bytes]) -> bool:
    try:
        decode(frames)
    except Exception:
        return False
    return True


def _wrong_types(rnd: random.Random, role: str) -> list[bytes]:
    msg = rnd.choice([m for m in _SAMPLES if dataclasses.fields(m)])  # type: ignore[arg-type]
    version, tag, body = msgpack.unpackb(encode(msg)[0], strict_map_key=False)
    name = rnd.choice(sorted(body))
    wrong = [v for v in _WRONG_VALUES if type(v) is not type(body[name])]
    body[name] = rnd.choice(wrong)
    if rnd.random() < 0.3:
        body[f"extra_{rnd.randrange(100)}"] = 1  # an unknown field
    if rnd.random() < 0.3 and len(body) > 1:
        del body[sorted(body)[0]]  # a missing field
    frames = [msgpack.packb([version, tag, body])]
    return frames if not _decodes(frames) else [msgpack.packb([version, tag, "body"])]


def _huge_lengths(rnd: random.Random, role: str) -> list[bytes]:
    head = msgpack.packb(PROTOCOL_VERSION) + msgpack.packb(rnd.choice(sorted(REGISTRY)))
    claim = rnd.choice(
        (
            b"\xdb" + struct.pack(">I", 2**32 - 1),  # str32 of 4 GiB
            b"\xc6" + struct.pack(">I", 2**31),  # bin32 of 2 GiB
            b"\xdd" + struct.pack(">I", 2**32 - 1),  # array32 of 4G items
            b"\xdf" + struct.pack(">I", 2**32 - 1),  # map32 of 4G pairs
        )
    )
    outer = rnd.choice((b"\x93", b"\xdd" + struct.pack(">I", 2**32 - 1)))
    return [outer + head + claim + rnd.randbytes(rnd.randrange(0, 16))]


def _unknown_tag(rnd: random.Random, role: str) -> list[bytes]:
    tag = rnd.choice((0, 9, 999, 2**16 - 1, 2**40, -5, "Ping", 3.5, None))
    while type(tag) is int and tag in REGISTRY:
        tag += 1
    return [msgpack.packb([PROTOCOL_VERSION, tag, {}])]


def _wrong_version(rnd: random.Random, role: str) -> list[bytes]:
    version, tag, body = msgpack.unpackb(_valid_header(rnd), strict_map_key=False)
    bad = rnd.choice((version + 1, version - 1, 0, "1", None, 2**40))
    return [msgpack.packb([bad, tag, body])]


def _wrong_actor(rnd: random.Random, role: str) -> list[bytes]:
    handled = HANDLED.get(role, frozenset())
    msg = rnd.choice([m for m in _SAMPLES if type(m).__name__ not in handled])
    return [bytes(f) for f in encode(msg)]


def _tensor_header(index: Any, lib: Any, dtype: Any, shape: Any) -> msgpack.ExtType:
    return msgpack.ExtType(TENSOR_EXT, msgpack.packb([index, lib, dtype, shape]))


def _blob_header(tensor: msgpack.ExtType) -> bytes:
    version, tag, body = msgpack.unpackb(
        encode(TensorBlob(name="w", tensor=np.zeros(2, np.float32)))[0],
        strict_map_key=False,
        ext_hook=lambda code, data: msgpack.ExtType(code, data),
    )
    body["tensor"] = tensor
    return bytes(msgpack.packb([version, tag, body]))


def _oversized_tensor(rnd: random.Random, role: str) -> list[bytes]:
    shape = rnd.choice(((2**40,), (2**20, 2**20), (1 << 62,), (3, 2**31)))
    lib, dtype = rnd.choice((("np", "float32"), ("pt", "bfloat16"), ("np", "int64")))
    return [_blob_header(_tensor_header(0, lib, dtype, shape)), rnd.randbytes(16)]


def _frame_count(rnd: random.Random, role: str) -> list[bytes]:
    header = [bytes(f) for f in encode(TensorBlob(name="w", tensor=np.zeros(4, np.float32)))]
    choice = rnd.randrange(4)
    if choice == 0:
        return []  # no message at all after the correlation frame
    if choice == 1:
        return header[:1]  # the tensor's frame is missing
    if choice == 2:
        return [*header, *(b"\x00" * 16 for _ in range(rnd.randrange(1, 6)))]  # extra frames
    # a frame nothing refers to (after a message that refers to no frame: token ids and
    # logprobs travel as frames since protocol version 2, and a spare frame would be theirs)
    plain = [m for m in _SAMPLES if len(encode(m)) == 1]
    return [bytes(encode(rnd.choice(plain))[0]), b"\x00" * rnd.randrange(1, 32)]


def _bad_tensor_header(rnd: random.Random, role: str) -> list[bytes]:
    bad = rnd.choice(
        (
            _tensor_header(5, "np", "float32", (4,)),  # missing frame
            _tensor_header(-1, "np", "float32", (4,)),
            _tensor_header(0, "np", "object", (4,)),  # a dtype that would run code
            _tensor_header(0, "pickle", "float32", (4,)),
            _tensor_header(0, "np", "float32", (-4,)),
            _tensor_header(0, "np", "float32", "4"),
            msgpack.ExtType(TENSOR_EXT, rnd.randbytes(rnd.randrange(0, 12))),
            msgpack.ExtType(rnd.choice((0, 2, 42, 127)), b"\x00"),
        )
    )
    return [_blob_header(bad), b"\x00" * 16]


_FRAMES: Final = {
    "truncated": _truncated,
    "random_bytes": _random_bytes,
    "wrong_types": _wrong_types,
    "huge_lengths": _huge_lengths,
    "unknown_tag": _unknown_tag,
    "wrong_version": _wrong_version,
    "wrong_actor": _wrong_actor,
    "oversized_tensor": _oversized_tensor,
    "frame_count": _frame_count,
    "bad_tensor_header": _bad_tensor_header,
}


# --- sending ---------------------------------------------------------------------------------


@dataclass
class FuzzTally:
    frames: int = 0
    calls: int = 0
    error_replies: int = 0
    other_replies: int = 0
    missing_replies: int = 0

    def as_dict(self) -> dict[str, int]:
        return {
            "frames": self.frames,
            "calls": self.calls,
            "error_replies": self.error_replies,
            "other_replies": self.other_replies,
            "missing_replies": self.missing_replies,
        }


async def send_cases(
    address: str, cases: Sequence[FuzzCase], *, batch: int = 200, reply_timeout_s: float = 30.0
) -> FuzzTally:
    """Send `cases` to the inbox at `address` over a raw DEALER, in batches; each batch's
    calls must be answered (`ErrorReply`) before the next batch goes."""
    tally = FuzzTally()
    ctx = zmq.asyncio.Context()
    sock = ctx.socket(zmq.DEALER)
    sock.setsockopt(zmq.LINGER, 0)
    sock.connect(address)
    try:
        for start in range(0, len(cases), batch):
            waiting: set[bytes] = set()
            for case in cases[start : start + batch]:
                corr = secrets.token_bytes(8) if case.is_call else b""
                if case.is_call:
                    waiting.add(corr)
                await sock.send_multipart([corr, *case.frames])
                tally.frames += 1
            tally.calls += len(waiting)
            with anyio.move_on_after(reply_timeout_s):
                while waiting:
                    reply = await sock.recv_multipart()
                    if reply[0] not in waiting:
                        continue
                    waiting.discard(reply[0])
                    try:
                        msg = decode(reply[1:])
                    except TransportError:
                        msg = None
                    if isinstance(msg, ErrorReply):
                        tally.error_replies += 1
                    else:
                        tally.other_replies += 1
            tally.missing_replies += len(waiting)
    finally:
        sock.close(linger=0)
        ctx.term()
    return tally


async def fuzz_cluster(
    cluster: Cluster, cases_by_actor: Mapping[tuple[str, int], Sequence[FuzzCase]]
) -> dict[str, Any]:
    """Send each actor its cases; then count actors that died or stopped answering."""
    totals = FuzzTally()
    kinds: Counter[str] = Counter()
    per_actor: dict[str, dict[str, int]] = {}
    for (role, index), cases in cases_by_actor.items():
        tally = await send_cases(cluster.config.address(role, index), cases)
        per_actor[f"{role}-{index}"] = tally.as_dict()
        kinds.update(c.kind for c in cases)
        for key, value in tally.as_dict().items():
            setattr(totals, key, getattr(totals, key) + value)
    crashed = await dead_or_mute(cluster)
    return {
        **totals.as_dict(),
        "actor_crashes": len(crashed),
        "crashed": crashed,
        "by_kind": dict(sorted(kinds.items())),
        "by_actor": per_actor,
    }


async def dead_or_mute(cluster: Cluster) -> list[str]:
    """Actors whose process exited or that do not answer a `Ping`."""
    out = []
    for (role, index), status in cluster.status.items():
        if status.process is not None and status.process.poll() is not None:
            out.append(f"{role}-{index}")
            continue
        try:
            reply = await cluster.call(role, index, Ping(seq=7), timeout=30)
        except TransportError:
            out.append(f"{role}-{index}")
            continue
        if not isinstance(reply, Pong) or reply.seq != 7:
            out.append(f"{role}-{index}")
    return out


def cases_for(
    cluster_roles: Sequence[tuple[str, int]], frames_per_actor: int, seed: int = 0
) -> dict[tuple[str, int], list[FuzzCase]]:
    rnd = random.Random(seed)
    n = frames_per_actor
    return {
        (role, index): [make_case(KINDS[i % len(KINDS)], rnd, role) for i in range(n)]
        for role, index in cluster_roles
    }


# --- the whole check, for benchmarks -------------------------------------------------------

TINY_MODEL: Final = {
    "hidden": 64, "num_layers": 2, "num_heads": 4, "num_kv_heads": 2, "intermediate": 128,
    "max_context": 256, "vocab_size": 64,
}  # fmt: skip


def fuzz_topology(run_dir: str) -> PipelineConfig:
    """Every actor kind once: splitter, estimator, scheduler, a built-in generator on a
    tiny random model, the draft-tree store and a trainer of the same model."""
    from pipeline.rollout.api import rollout_config

    cfg = rollout_config(
        num_generators=1, generator={"model": TINY_MODEL, "max_batch": 8}, run_dir=run_dir
    )
    trainer = ActorGroup(role="trainer", kind="trainer", options={"model": TINY_MODEL})
    return PipelineConfig(
        topology=Topology(actors=(*cfg.topology.actors, trainer)),
        transport=cfg.transport,
        run_id=cfg.run_id,
        ready_timeout_s=300.0,
    )


REFERENCE_PROMPTS: Final = tuple(
    PromptSpec(prompt_id=f"p{i}", token_ids=(1 + i, 2 + 2 * i, 3)) for i in range(4)
)
REFERENCE_SAMPLING: Final = SamplingSpec(temperature=1.0, seed=5, max_new_tokens=12)


async def fuzz_actors_async(
    frames_per_actor: int, *, seed: int = 0, run_dir: str | None = None
) -> dict[str, Any]:
    """See the module docstring; `fuzz_actors` is the synchronous wrapper."""
    from pipeline.rollout.api import Rollout

    start = time.perf_counter()
    base = run_dir or tempfile.mkdtemp(prefix="seer-fuzz-")
    async with Rollout(fuzz_topology(base)) as rollout:
        assert rollout.cluster is not None
        before = await rollout.generate(REFERENCE_PROMPTS, 2, REFERENCE_SAMPLING)
        cases = cases_for(list(rollout.cluster.status), frames_per_actor, seed)
        report = await fuzz_cluster(rollout.cluster, cases)
        after = await rollout.generate(REFERENCE_PROMPTS, 2, REFERENCE_SAMPLING)
    tokens = [[s.token_ids for s in g.samples] for g in before]
    report["outputs_match"] = tokens == [[s.token_ids for s in g.samples] for g in after]
    report["seconds"] = time.perf_counter() - start
    report["run_dir"] = str(Path(base))
    return report


def fuzz_actors(frames_per_actor: int = 1000, *, seed: int = 0) -> dict[str, Any]:
    """Fuzz every actor kind with `frames_per_actor` malformed frames; for `seer bench
    faults` ("fuzz" entry: {"frames", "actor_crashes"} and more, see the module docstring).
    Blocks for about a minute on 2 cores at 1,000 frames per actor (local processes)."""
    result: dict[str, Any] = anyio.run(
        lambda: fuzz_actors_async(frames_per_actor, seed=seed), backend="asyncio"
    )
    return result
