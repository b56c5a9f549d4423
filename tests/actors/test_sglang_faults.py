"""The SGLang engine against a misbehaving server over real HTTP: a refused request fails
its chunk with the server's message (no retry); 503, a refused connection, silence and a
failing health check make the server lost (the chunk is not reported, `check` fails once,
then serves again); garbage fails the chunk. Every call is bounded: nothing hangs."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import anyio
import pytest

from actors.generator import (
    ChunkRequest,
    SamplingParams,
    ServerError,
    ServerLostError,
)
from actors.generator.sglang.engine import SGLangEngine
from actors.generator.sglang.launch import free_port
from actors.generator.sglang.options import SGLangOptions
from actors.model import ModelOptions
from tests.actors.bad_server import BadServer

pytestmark = pytest.mark.timeout(60)
GREEDY = SamplingParams(temperature=0.0)


def engine_for(url: str, **sglang: object) -> SGLangEngine:
    settings: dict[str, object] = {
        "request_timeout_s": 2.0,
        "connect_timeout_s": 1.0,
        "health_timeout_s": 1.0,
        "load_timeout_s": 1.0,
        "health_interval_s": 0.2,
        **sglang,
    }
    opts = SGLangOptions(urls=(url,), **settings)  # type: ignore[arg-type]
    return SGLangEngine(opts, ModelOptions(), eos_token_id=6)


def chunk(rid: str = "r0:g0:s0;", max_new: int = 4) -> ChunkRequest:
    return ChunkRequest(rid, (1, 2, 3), max_new, params=GREEDY, max_new_tokens=16)


async def started(url: str) -> SGLangEngine:
    engine = engine_for(url)
    await engine.start()
    return engine


def test_a_good_answer_relabels_the_version_and_parses() -> None:
    async def main() -> None:
        with BadServer("ok") as server:
            engine = await started(server.url)
            assert server.version == "0"  # relabelled without aborting
            result = await engine.generate(chunk())
            await engine.aclose()
        assert result.token_ids == (4,) and result.logprobs == (-0.5,)
        assert result.finish_reason == "length"  # 1 token of 4 asked: the server's limit
        assert engine.context_len == 64  # from /server_info

    anyio.run(main)


@pytest.mark.parametrize(("mode", "needle"), [("400", "max_tokens"), ("garbage", "non-JSON")])
def test_a_refused_or_garbled_chunk_fails_with_a_message_and_is_not_retried(
    mode: str, needle: str
) -> None:
    async def main() -> None:
        with BadServer(mode) as server:
            engine = await started(server.url)
            with pytest.raises(ServerError, match=needle):
                await engine.generate(chunk())
            assert len(server.bodies) == 1
            await engine.check()  # the server still counts as serving
            await engine.aclose()

    anyio.run(main)


def test_a_malformed_response_is_a_typed_error() -> None:
    async def main() -> None:
        with BadServer("shape") as server:
            engine = await started(server.url)
            with pytest.raises(ServerError, match="malformed"):
                await engine.generate(chunk())
            await engine.aclose()

    anyio.run(main)


@pytest.mark.parametrize("mode", ["503", "hang"])
def test_503_or_silence_loses_the_server_once_then_it_serves_again(mode: str) -> None:
    async def main() -> None:
        with BadServer(mode) as server:
            engine = await started(server.url)
            with anyio.fail_after(10), pytest.raises(ServerLostError):
                await engine.generate(chunk())
            with pytest.raises(ServerLostError, match="1 chunks lost"):
                await engine.check()  # the scheduler hears of it exactly once
            server.mode = "ok"
            load = await engine.check()  # healthy again
            assert load.max_running == 8
            assert (await engine.generate(chunk())).token_ids == (4,)
            await engine.aclose()

    anyio.run(main)


def test_a_refused_connection_is_a_lost_server() -> None:
    async def main() -> None:
        engine = engine_for(f"http://127.0.0.1:{free_port()}")
        engine._client = None
        with anyio.fail_after(10), pytest.raises(ServerLostError):
            await engine.start()
        await engine.aclose()

    anyio.run(main)


def test_a_failing_health_check_while_chunks_wait_loses_them() -> None:
    async def main() -> None:
        with BadServer("hang") as server:
            engine = engine_for(server.url, request_timeout_s=60.0)
            await engine.start()
            server.health_mode = "503"
            lost: list[BaseException] = []

            async def one() -> None:
                try:
                    await engine.generate(chunk())
                except ServerLostError as exc:
                    lost.append(exc)

            async with anyio.create_task_group() as tg:
                tg.start_soon(engine.watch)
                tg.start_soon(one)
                with anyio.fail_after(10):
                    while not engine.is_lost:  # the watch saw /health_generate fail
                        await anyio.sleep(0.05)
                    with pytest.raises(ServerLostError):
                        await engine.check()  # ... reports it and cancels the waiting call
                    while not lost:
                        await anyio.sleep(0.05)
                tg.cancel_scope.cancel()
            await engine.aclose()

    anyio.run(main)


def test_a_speculating_servers_statistics_reach_the_rollout_metrics(tmp_path: Path) -> None:
    """SGLang's `spec_*` meta fields of each chunk become the rollout's speculation metrics
    (the backend itself drafts nothing)."""
    from pipeline.rollout.api import Rollout, rollout_config
    from transport.messages import SamplingSpec

    async def main() -> dict[str, Any]:
        with BadServer("spec") as server:
            gen = {
                "backend": "sglang",
                "eos_token_id": 6,
                "spec": {"mode": "off"},
                "sglang": {"urls": [server.url]},
            }
            config = rollout_config(num_generators=1, generator=gen, run_dir=str(tmp_path))
            async with Rollout(config, mode="inprocess") as rollout:
                result = await rollout.generate_with_record(
                    [(1, 2)], 2, SamplingSpec(max_new_tokens=8)
                )
        assert [s.token_ids for s in result.groups[0].samples] == [(1, 2, 6)] * 2
        return result.metrics()

    metrics = anyio.run(main)
    assert metrics["num_spec_steps"] == 4 and metrics["mean_accept_len"] == 1.5
    assert metrics["accept_rate"] == 0.25
