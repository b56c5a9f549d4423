"""Stand-in generators that misbehave on purpose: the fault tests' (`tests/faults/`) and the
chunk-fault cases of `seer bench faults` (`pipeline.bench.fault_cases`).

They speak the generator protocol exactly (they are `InstantGenerator`s, which answer every
chunk at once with the `ChunkFinished` a `GeneratorActor` would send), and differ in one way:
- `OverlongGenerator`: a chunk of a prompt starting with `BAD_TOKEN` reports more tokens
  than the chunk allowed (a buggy or malicious engine);
- `SilentGenerator`: takes every chunk and never answers (a hung engine); `chunks_taken`
  waits until one has taken a chunk;
- `WeightTakingGenerator`: also takes versioned weights (`WeightsBucket`) and reports the
  version it holds, as a real generator does after its swap;
- `AbortingGenerator`: every second chunk ends in "abort" after half of its tokens (an
  SGLang server aborted it: `/abort_request`, a scheduler retraction);
- `BrokenGenerator`: generator 1 fails every chunk as one whose SGLang server came back
  from its supervisor with default weights does (no tokens, an engine error); the others
  serve;
- `DroppingGenerator`: the first result of each generator is lost on the wire.
Kinds: "pipeline.bench.faulty:<Name>". Each fault it injects is logged as a `fault_injected`
event (with `fault` and `request`), so that the bench can time the scheduler's reaction.
"""

from __future__ import annotations

from collections.abc import Mapping

import anyio

from actors.base import Handler
from pipeline.bench.standin import InstantGenerator
from pipeline.launch import Cluster
from transport.messages import (
    Ack,
    ActorStats,
    ChunkAssigned,
    ChunkFinished,
    GetStats,
    Message,
    WeightsBucket,
)

BAD_TOKEN = 99


class OverlongGenerator(InstantGenerator):
    async def send_to(self, role: str, index: int, msg: Message) -> None:
        if isinstance(msg, ChunkFinished) and msg.request_id in self.bad:
            extra = (1,) * 5
            msg = ChunkFinished(
                **{
                    **{f: getattr(msg, f) for f in msg.__dataclass_fields__},
                    "token_ids": msg.token_ids + extra,
                    "logprobs": msg.logprobs + (-1.0,) * 5,
                }
            )
        await super().send_to(role, index, msg)

    bad: set[str] = set()

    async def handle_chunk_assigned(self, msg: ChunkAssigned) -> None:
        if msg.prompt_ids[:1] == (BAD_TOKEN,):
            self.bad.add(msg.request_id)
        await super().handle_chunk_assigned(msg)


class SilentGenerator(InstantGenerator):
    async def handle_chunk_assigned(self, msg: ChunkAssigned) -> None:
        self.num_chunks += 1  # taken, never answered (`chunks_taken` waits on it)


async def chunks_taken(cluster: Cluster, timeout_s: float = 60.0) -> None:
    """Wait until some generator of `cluster` holds a chunk: the rollout is under way (for
    `SilentGenerator`s, whose chunks never come back)."""
    generators = [index for role, index in cluster.status if role == "generator"]
    with anyio.fail_after(timeout_s):
        while True:
            for index in generators:
                stats = await cluster.call("generator", index, GetStats(), timeout=10)
                assert isinstance(stats, ActorStats)
                if stats.counters.get("num_chunks", 0) > 0:
                    return
            await anyio.sleep(0.02)


class WeightTakingGenerator(InstantGenerator):
    def handlers(self) -> Mapping[type[Message], Handler]:
        return {**super().handlers(), WeightsBucket: self.handle_weights_bucket}

    async def handle_weights_bucket(self, msg: WeightsBucket) -> Ack:
        if msg.is_last:
            self.weight_version = msg.version
        return Ack()

    async def handle_chunk_assigned(self, msg: ChunkAssigned) -> None:
        # a real engine refuses a chunk for other weights; record what this one holds
        if msg.weight_version != self.weight_version:
            raise ValueError(
                f"chunk for weights {msg.weight_version}, holding {self.weight_version}"
            )
        await super().handle_chunk_assigned(msg)


def _with(msg: ChunkFinished, **changes: object) -> ChunkFinished:
    return ChunkFinished(**{**{f: getattr(msg, f) for f in msg.__dataclass_fields__}, **changes})


class AbortingGenerator(InstantGenerator):
    num_sent = 0

    async def send_to(self, role: str, index: int, msg: Message) -> None:
        if isinstance(msg, ChunkFinished):
            self.num_sent += 1
            if self.num_sent % 2 == 0:
                half = len(msg.token_ids) // 2
                tokens, logprobs = msg.token_ids[:half], msg.logprobs[:half]
                msg = _with(msg, token_ids=tokens, logprobs=logprobs, finish_reason="abort")
                self.log.warning("fault_injected", fault="abort", request=msg.request_id)
        await super().send_to(role, index, msg)


class BrokenGenerator(InstantGenerator):
    async def send_to(self, role: str, index: int, msg: Message) -> None:
        if isinstance(msg, ChunkFinished) and self.ctx.index == 1:
            error = "WeightVersionError: the server answered with ['None']"
            msg = _with(msg, token_ids=(), logprobs=(), finish_reason="abort", error=error)
            self.log.warning("fault_injected", fault="broken", request=msg.request_id)
        await super().send_to(role, index, msg)


class DroppingGenerator(InstantGenerator):
    num_sent = 0

    async def send_to(self, role: str, index: int, msg: Message) -> None:
        if isinstance(msg, ChunkFinished):
            self.num_sent += 1
            if self.num_sent == 1:
                self.log.warning("fault_injected", fault="dropped", request=msg.request_id)
                return  # lost on the wire
        await super().send_to(role, index, msg)
