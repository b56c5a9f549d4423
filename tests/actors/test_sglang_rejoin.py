"""An SGLang server that comes back wrong (issue 34 section 2), over real HTTP against a
misbehaving server: restarted by its supervisor with its default weights (between two
health checks, or while it counted as lost), or answering a null logprob. Before the fixes
every chunk of a restarted server failed its version check and ended its sample in
"error", a server back from the lost was taken at its old version on health alone, and a
null logprob became a NaN in the trainer's loss."""

from __future__ import annotations

import math

import anyio
import pytest

from actors.generator import ChunkRequest, SamplingParams, ServerError, ServerLostError
from actors.generator.engine import error_result
from actors.generator.sglang.engine import UNKNOWN_VERSION, SGLangEngine
from actors.generator.sglang.protocol import parse_generate
from tests.actors.bad_server import BadServer
from tests.actors.test_sglang_faults import engine_for

pytestmark = pytest.mark.timeout(60)
GREEDY = SamplingParams(temperature=0.0)


def chunk(version: int | None = None) -> ChunkRequest:
    return ChunkRequest(
        "r0:g0:s0;", (1, 2, 3), 4, params=GREEDY, max_new_tokens=16, weight_version=version
    )


async def published(server: BadServer, version: int) -> SGLangEngine:
    engine = engine_for(server.url)
    await engine.start()
    await engine.update_weights("/weights/published", version)
    assert server.version == str(version)
    return engine


def test_a_server_restarted_between_health_checks_is_lost_then_holds_no_version() -> None:
    async def main() -> None:
        with BadServer("ok") as server:
            engine = await published(server, 3)
            server.version = "default"  # its supervisor restarted it
            with pytest.raises(ServerLostError, match="weight version"):
                await engine.generate(chunk(3))  # not a failed sample: a lost server
            with pytest.raises(ServerLostError):
                await engine.check()  # the scheduler hears of it (and re-queues) once
            await engine.check()  # it answers again...
            assert engine.weight_version == UNKNOWN_VERSION  # ...with no version of ours
            await engine.update_weights("/weights/published", 3)  # the trainer's push
            assert (await engine.generate(chunk(3))).token_ids == (4,)
            await engine.aclose()

    anyio.run(main)


def test_a_server_restarted_while_lost_comes_back_with_no_version_of_ours() -> None:
    async def main() -> None:
        with BadServer("503") as server:
            engine = await published(server, 3)
            with pytest.raises(ServerLostError):
                await engine.generate(chunk(3))
            with pytest.raises(ServerLostError):
                await engine.check()
            server.mode, server.version = "ok", "default"  # restarted meanwhile
            await engine.check()  # healthy: back, but not at version 3
            assert engine.weight_version == UNKNOWN_VERSION
            await engine.aclose()
        # never published: the server's own weights are version 0, relabelled
        with BadServer("503") as server:
            engine = engine_for(server.url)
            await engine.start()
            with pytest.raises(ServerLostError):
                await engine.generate(chunk(0))
            with pytest.raises(ServerLostError):
                await engine.check()
            server.mode, server.version = "ok", "default"
            await engine.check()
            assert engine.weight_version == 0 and server.version == "0"
            await engine.aclose()

    anyio.run(main)


def test_a_null_logprob_is_refused_naming_the_server_and_request() -> None:
    async def main() -> None:
        with BadServer("null_logprob") as server:
            engine = engine_for(server.url)
            await engine.start()
            with pytest.raises(ServerError, match="logprob None") as info:
                await engine.generate(chunk())
            await engine.aclose()
        message = str(info.value)
        assert server.url in message and "r0:g0:s0;" in message
        # the generator reports it as the engine's fault: the scheduler re-queues the chunk
        assert error_result("r0:g0:s0;", info.value, 0).finish_reason == "abort"

    anyio.run(main)


@pytest.mark.parametrize("bad", [math.nan, math.inf, -math.inf, None, True, "x"])
def test_a_non_finite_or_non_numeric_logprob_is_refused(bad: object) -> None:
    entries = [[-0.5, 4, None], [bad, 5, None]]
    data = {
        "output_ids": [4, 5],
        "meta_info": {"output_token_logprobs": entries, "finish_reason": {"type": "length"}},
    }
    with pytest.raises(ServerError, match=r"logprob .* of output token 1"):
        parse_generate(
            data, chunk(), max_new_tokens=4, context_len=64, eos_token_id=None, weight_version=0
        )
