"""One chunk per request in a generator (issue 34 section 2): the built-in engine's driver,
in process, given a newer chunk of a request whose older chunk is still in its engine (the
scheduler took the request back from a generator it thought lost, then gave it here again)
and an older chunk after a newer one. Before: the newer chunk failed as a duplicate, its
sample ended in "error", and the older chunk's end killed the actor on a `KeyError`. The
same over real processes (SIGSTOP, SIGCONT): tests/faults/test_frozen_generator.py."""

from __future__ import annotations

from typing import cast

import anyio
import pytest
import structlog

from actors.base import Mailbox
from actors.generator import ChunkResult, GeneratorOptions
from actors.generator.drivers import LocalDriver, RemoteDriver
from actors.generator.options import SpecConfig
from tests.actors.bad_server import BadServer
from tests.actors.engine_util import make_engine
from tests.actors.test_sglang_faults import engine_for
from transport.messages import ChunkAssigned, EndRollout, SamplingSpec

pytestmark = pytest.mark.anyio


def assigned(seq: int, budget: int, rollout: str = "r0") -> ChunkAssigned:
    return ChunkAssigned(
        rollout_id=rollout,
        request_id="r0:g0:s0;",
        chunk_seq=seq,
        prompt_ids=(1, 2, 3),
        generated_ids=(),
        max_chunk_tokens=budget,
        max_new_tokens=64,
        sampling=SamplingSpec(temperature=0.0, max_new_tokens=64),
        weight_version=0,
    )


async def run_driver(*msgs: ChunkAssigned) -> tuple[list[tuple[int, ChunkResult]], LocalDriver]:
    reports: list[tuple[int, ChunkResult]] = []

    async def report(msg: ChunkAssigned, chunk: ChunkResult) -> None:
        reports.append((msg.chunk_seq, chunk))

    active: dict[str, ChunkAssigned] = {}
    async with anyio.create_task_group() as tg:
        driver = LocalDriver(
            make_engine(),
            GeneratorOptions(spec=SpecConfig(mode="off")),
            report=report,
            start_soon=tg.start_soon,
            active=active,
            started={},
            step_log=None,
            mailbox=cast(Mailbox, None),  # no draft store: never used
            has_draft_store=False,
            log=structlog.get_logger(),
        )
        await driver.start()
        for msg in msgs:  # before the step loop admits any: the first is in the engine
            driver.assign(msg)
        with anyio.fail_after(30):
            while active or not reports:
                await anyio.sleep(0.01)
            await anyio.sleep(0.1)  # nothing else comes
        tg.cancel_scope.cancel()
    return reports, driver


async def test_a_newer_chunk_of_a_request_replaces_the_older_one_in_the_engine() -> None:
    reports, driver = await run_driver(assigned(1, 40), assigned(2, 8))
    [(seq, chunk)] = reports  # the older one aborted, its result never reported
    assert seq == 2 and chunk.finish_reason == "chunk" and len(chunk.token_ids) == 8
    assert driver.counters()["num_superseded_chunks"] == 1


async def test_an_older_chunk_after_a_newer_one_is_dropped_unrun() -> None:
    reports, driver = await run_driver(assigned(3, 8), assigned(2, 8))
    [(seq, chunk)] = reports
    assert seq == 3 and len(chunk.token_ids) == 8
    assert driver.counters()["num_stale_chunks"] == 1
    # a chunk of a new rollout is never stale, whatever its sequence
    reports, _ = await run_driver(assigned(3, 40), assigned(1, 8, rollout="r1"))
    assert [(s, len(c.token_ids)) for s, c in reports] == [(1, 8)]


async def test_a_newer_chunk_aborts_the_older_call_to_its_server() -> None:
    """The SGLang driver over real HTTP: the server holds one call per request, so the older
    call is aborted (`/abort_request`) and its "abort" answer dropped, then the newer runs."""
    reports: list[tuple[int, ChunkResult]] = []

    async def report(msg: ChunkAssigned, chunk: ChunkResult) -> None:
        reports.append((msg.chunk_seq, chunk))

    with BadServer("hang") as server:
        engine = engine_for(server.url, request_timeout_s=30.0)
        active: dict[str, ChunkAssigned] = {}
        async with anyio.create_task_group() as tg:
            driver = RemoteDriver(
                engine,
                GeneratorOptions(spec=SpecConfig(mode="off")),
                report=report,
                start_soon=tg.start_soon,
                active=active,
                started={},
                log=structlog.get_logger(),
            )
            await driver.start()
            with anyio.fail_after(20):
                driver.assign(assigned(1, 4))
                while not server.bodies:  # the older call is at the server
                    await anyio.sleep(0.01)
                server.mode = "ok"
                driver.assign(assigned(2, 4))
                while active or not reports:
                    await anyio.sleep(0.01)
                await anyio.sleep(0.1)
            tg.cancel_scope.cancel()
        await driver.aclose()
    [(seq, chunk)] = reports
    assert seq == 2 and chunk.token_ids == (4,)
    assert [b["rid"] for b in server.bodies][:1] == sorted(server.aborted)
    counters = driver.counters()
    assert counters["num_superseded_chunks"] == counters["num_stale_chunks"] == 1
    assert counters["num_lost_chunks"] == 0


async def test_a_rollouts_end_aborts_its_call_still_at_the_server() -> None:
    """The SGLang driver over real HTTP: a cancelled rollout's `EndRollout` aborts its chunk
    still running at the server (`/abort_request`: its capacity freed), whose answer is
    dropped. Before: the call ran on until the server finished it (here: never)."""
    reports: list[tuple[int, ChunkResult]] = []

    async def report(msg: ChunkAssigned, chunk: ChunkResult) -> None:
        reports.append((msg.chunk_seq, chunk))

    with BadServer("hang") as server:
        engine = engine_for(server.url, request_timeout_s=30.0)
        active: dict[str, ChunkAssigned] = {}
        async with anyio.create_task_group() as tg:
            driver = RemoteDriver(
                engine,
                GeneratorOptions(spec=SpecConfig(mode="off")),
                report=report,
                start_soon=tg.start_soon,
                active=active,
                started={},
                log=structlog.get_logger(),
            )
            await driver.start()
            with anyio.fail_after(20):
                driver.assign(assigned(1, 4))
                while not server.bodies:  # the call is at the server
                    await anyio.sleep(0.01)
                driver.end_rollout(EndRollout(rollout_id="r0", request_ids=("r0:g0:s0;",)))
                await driver.idle.wait()  # the call ended: aborted
            tg.cancel_scope.cancel()
        await driver.aclose()
    assert reports == [] and server.aborted == {server.bodies[0]["rid"]}
    assert driver.counters()["num_cancelled_chunks"] == 1
