"""The SGLang engine against `seer serve` (in this process, real HTTP): every request it
sends and every response it reads pass SGLang 0.5.23's own schema; abort keeps the partial
output; a published state dict reaches the server as a Hugging Face folder."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import pytest

from actors.generator import ChunkRequest, SamplingParams
from actors.generator.sglang.client import ReceivedResponse, SentRequest
from actors.generator.sglang.engine import SGLangEngine
from actors.generator.sglang.options import SGLangOptions
from actors.model import LlamaModel, ModelOptions
from pipeline.serve import ServeOptions, start_server
from pipeline.serve.schema import validate_generate_request, validate_generate_response
from tests.pipeline.serve_util import EOS, TINY, engine_greedy, save_tiny

pytestmark = pytest.mark.timeout(90)


@pytest.fixture(scope="module")
def model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return save_tiny(tmp_path_factory.mktemp("m") / "tiny.safetensors", seed=5)


@pytest.fixture(scope="module")
def server(model: Path) -> Iterator[str]:
    options = ServeOptions(max_batch=8, eos_token_id=EOS, step_delay_s=0.005)
    with start_server(str(model), port=0, options=options) as handle:
        yield handle.url


def judged(url: str, model: Path) -> tuple[SGLangEngine, dict[str, int]]:
    """An engine whose every /generate request and response SGLang's schema decodes (a
    violation raises inside the call, failing it); counts of each judged."""
    opts = SGLangOptions(urls=(url,), health_interval_s=0.2)
    model_opts = ModelOptions(path=str(model))
    judged = {"requests": 0, "responses": 0}

    async def on_request(request: SentRequest) -> None:
        if request.path == "/generate":
            assert request.content is not None
            validate_generate_request(json.loads(request.content))
            judged["requests"] += 1

    async def on_response(response: ReceivedResponse) -> None:
        if response.request.path == "/generate" and response.status_code == 200:
            validate_generate_response(response.json())
            judged["responses"] += 1

    hooks = {"request": [on_request], "response": [on_response]}
    return SGLangEngine(opts, model_opts, eos_token_id=EOS, event_hooks=hooks), judged


async def start(engine: SGLangEngine) -> None:
    await engine.start()


def test_every_request_and_response_passes_sglangs_schema(server: str, model: Path) -> None:
    prompts = [[3, 4, 5], [7, 8, 9, 10]]
    params = [
        SamplingParams(temperature=0.0),
        SamplingParams(temperature=0.7, top_k=5, top_p=0.9, seed=11),
        SamplingParams(temperature=1.0, top_k=0, ignore_eos=True, stop_token_ids=(1, 2)),
    ]

    async def main() -> list[tuple[int, ...]]:
        engine, counts = judged(server, model)
        await start(engine)
        num_calls = 0
        greedy: list[tuple[int, ...]] = []
        for i, prompt in enumerate(prompts):
            tokens: tuple[int, ...] = ()
            while True:  # 8-token chunks resumed as prompt + generated, as the scheduler does
                req = ChunkRequest(f"g:s{i};", tuple(prompt), 8, tokens, params[0], 0, 20)
                result = await engine.generate(req)
                num_calls += 1
                tokens += result.token_ids
                if result.finish_reason != "chunk":
                    break
            greedy.append(tokens)
        async with anyio.create_task_group() as tg:  # several in flight at once
            for j, p in enumerate(params[1:]):
                req = ChunkRequest(f"g:t{j};", (1, 2, 3), 6, params=p)
                tg.start_soon(engine.generate, req)
        await engine.aclose()
        assert counts == {"requests": num_calls + 2, "responses": num_calls + 2}
        assert num_calls >= 4
        return greedy

    greedy = anyio.run(main)
    reference = engine_greedy(model, prompts, 20)
    assert [list(t) for t in greedy] == reference


def test_abort_returns_the_partial_output(server: str, model: Path) -> None:
    async def main() -> None:
        engine, _ = judged(server, model)
        await start(engine)
        req = ChunkRequest("long;", (3, 4), 200, params=SamplingParams(ignore_eos=True))
        out: list[Any] = []

        async def run() -> None:
            out.append(await engine.generate(req))

        async with anyio.create_task_group() as tg:
            tg.start_soon(run)
            with anyio.fail_after(20):
                while True:  # tokens are coming
                    await anyio.sleep(0.1)
                    load = await engine.check()
                    if load.num_running:
                        break
                await anyio.sleep(0.2)
                assert await engine.abort("long;")
        assert not await engine.abort("long;")  # nothing in flight any more
        await engine.aclose()
        result = out[0]
        assert result.finish_reason == "abort" and 0 < len(result.token_ids) < 200

    anyio.run(main)


def test_a_published_state_dict_reaches_the_server(
    server: str, model: Path, tmp_path: Path
) -> None:
    new = LlamaModel.random(TINY, seed=9)
    new_path = save_tiny(tmp_path / "new.safetensors", seed=9)

    async def main() -> tuple[int, ...]:
        engine, _ = judged(server, model)
        await start(engine)
        await engine.update_weights(new.state_dict(), version=3)
        req = ChunkRequest(
            "w;", (3, 4, 5), 12, params=SamplingParams(temperature=0.0), weight_version=3
        )
        result = await engine.generate(req)
        assert result.weight_version == 3
        await engine.update_weights(str(model), version=4)  # a path is loaded as is
        await engine.aclose()
        return result.token_ids

    tokens = anyio.run(main)
    assert list(tokens) == engine_greedy(new_path, [[3, 4, 5]], 12)[0]
