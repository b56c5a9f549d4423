"""`/health_generate` on a paused `seer serve`, as SGLang 0.5.23 answers it, and the SGLang
backend's health watch during its own pause.

SGLang's health check is a 1-token request that passes when any scheduler output arrives
within `SGLANG_HEALTH_CHECK_TIMEOUT` (20 s). While generation is paused the request waits
at the pause like any `/generate` and nothing runs, so it answers 503 once the timeout ends,
unless generation continues first. The backend pauses its server for every weight update;
a health probe that meets that pause must not make the server count as lost.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path

import anyio
import httpx
import pytest

from actors.generator import ChunkRequest, SamplingParams
from actors.generator.errors import ServerLostError
from actors.generator.sglang.client import SentRequest
from actors.generator.sglang.engine import SGLangEngine
from actors.generator.sglang.options import SGLangOptions
from actors.model import ModelOptions
from pipeline.serve import ServeOptions, ServerHandle, start_server
from pipeline.serve.server import health_check_timeout_from_env
from tests.pipeline.serve_util import EOS, in_background, save_tiny

pytestmark = pytest.mark.timeout(90)


@pytest.fixture(scope="module")
def model_path(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return save_tiny(tmp_path_factory.mktemp("health") / "tiny.safetensors")


def serve(model_path: Path, health_check_timeout_s: float) -> ServerHandle:
    options = ServeOptions(eos_token_id=EOS, health_check_timeout_s=health_check_timeout_s)
    return start_server(str(model_path), "127.0.0.1", 0, options)


@pytest.fixture
def quick(model_path: Path) -> Iterator[ServerHandle]:
    with serve(model_path, 0.5) as handle:
        yield handle


@pytest.mark.parametrize("mode", ["abort", "retract", "in_place"])
def test_a_paused_server_fails_its_health_check_when_the_timeout_ends(
    quick: ServerHandle, mode: str
) -> None:
    with httpx.Client(base_url=quick.url, timeout=30.0) as http:
        assert http.get("/health_generate").status_code == 200
        assert http.post("/pause_generation", json={"mode": mode}).status_code == 200
        assert http.get("/health_generate").status_code == 503
        assert http.get("/health").status_code == 503  # one handler, as SGLang's
        assert http.get("/ready").status_code == 503
        assert http.get("/v1/loads").status_code == 200  # telemetry still answers
        assert http.post("/continue_generation", json={}).status_code == 200
        assert http.get("/ready").status_code == 503  # unhealthy until a check passes
        assert http.get("/health_generate").status_code == 200
        assert http.get("/ready").status_code == 200


def test_a_health_check_waiting_at_the_pause_passes_once_generation_continues(
    model_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    with serve(model_path, 60.0) as handle, httpx.Client(base_url=handle.url, timeout=90.0) as http:
        at_the_pause = threading.Event()
        wait_unpaused = handle.bridge.wait_unpaused

        async def waiting(timeout_s: float) -> bool:
            at_the_pause.set()
            return await wait_unpaused(timeout_s)

        monkeypatch.setattr(handle.bridge, "wait_unpaused", waiting)
        http.post("/pause_generation", json={"mode": "in_place"})
        pending = in_background(lambda: httpx.get(f"{handle.url}/health_generate", timeout=90))
        assert at_the_pause.wait(30)  # the check reached the pause
        assert not pending.done()  # and is held there
        http.post("/continue_generation", json={})
        assert pending.result(timeout=60).status_code == 200


def test_the_health_check_timeout_comes_from_sglangs_variable(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("SGLANG_HEALTH_CHECK_TIMEOUT", "7")
    assert health_check_timeout_from_env() == 7.0
    assert ServeOptions().health_check_timeout_s == 7.0
    for bad in ("soon", "0"):
        monkeypatch.setenv("SGLANG_HEALTH_CHECK_TIMEOUT", bad)
        with pytest.raises(ValueError, match="SGLANG_HEALTH_CHECK_TIMEOUT"):
            health_check_timeout_from_env()
    monkeypatch.delenv("SGLANG_HEALTH_CHECK_TIMEOUT")
    assert health_check_timeout_from_env() == 20.0


def test_the_health_watch_does_not_count_its_own_pause_as_a_lost_server(
    quick: ServerHandle, model_path: Path
) -> None:
    """A weight update held paused for 4 server health timeouts while a chunk waits at the
    pause: the watch (probing every 50 ms) must not declare the server lost."""
    hold_s = 2.0

    async def hold_the_update(request: SentRequest) -> None:
        if request.path == "/update_weights_from_disk":
            await anyio.sleep(hold_s)  # the server stays paused meanwhile

    opts = SGLangOptions(urls=(quick.url,), health_interval_s=0.05, health_timeout_s=5.0)
    model = ModelOptions(path=str(model_path))
    engine = SGLangEngine(opts, model, eos_token_id=EOS, event_hooks={"request": [hold_the_update]})
    outcome: list[object] = []

    async def chunk() -> None:
        req = ChunkRequest("c;", (3, 4, 5), 4, params=SamplingParams(temperature=0.0))
        try:
            outcome.append(await engine.generate(req))
        except Exception as exc:  # a version mismatch may end it; a lost server may not
            outcome.append(exc)

    updated = anyio.Event()

    async def update() -> None:
        await engine.update_weights(str(model_path), 1)
        updated.set()

    async def waiting(http: httpx.AsyncClient) -> int:
        return int((await http.get("/v1/loads")).json()["loads"][0]["num_waiting_reqs"])

    async def main() -> None:
        await engine.start()
        async with httpx.AsyncClient(base_url=quick.url) as http:
            with anyio.fail_after(60):
                async with anyio.create_task_group() as tg:
                    tg.start_soon(engine.watch)
                    tg.start_soon(update)
                    while (await http.get("/ready")).status_code != 503:  # until paused
                        await anyio.sleep(0.01)
                    tg.start_soon(chunk)  # it waits at the pause: the watch has work to watch
                    while await waiting(http) < 1:
                        await anyio.sleep(0.01)
                    await updated.wait()
                    while not outcome:
                        await anyio.sleep(0.05)
                    tg.cancel_scope.cancel()
            assert not engine.is_lost
            await engine.check()  # does not raise: no chunk counts as lost
        await engine.aclose()

    anyio.run(main)
    assert not isinstance(outcome[0], ServerLostError), outcome[0]
    assert engine.weight_version == 1
