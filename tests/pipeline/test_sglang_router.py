"""SGLang's router (`sglang-router` 0.3.2, its Rust binary) in front of two `seer serve`
processes: `/generate` goes through it, pinned to the server our scheduler placed each chunk
on; control calls go to the servers directly."""

from __future__ import annotations

import dataclasses
import importlib.util
import json
import subprocess
import sys
from collections import Counter
from pathlib import Path
from typing import Any

import anyio
import pytest

from actors.generator import ChunkRequest, SamplingParams
from actors.generator.errors import ServerLostError
from actors.generator.sglang.client import USER_AGENT
from actors.generator.sglang.engine import SGLangEngine
from actors.generator.sglang.options import SGLangOptions
from actors.generator.sglang.router import (
    RouterError,
    is_registered,
    is_upstream_failure,
    worker_index,
)
from actors.model import LlamaModel, ModelOptions
from actors.model.weights import save_model
from pipeline.rollout.api import Rollout, rollout_config
from pipeline.serve import ServeOptions, start_server
from tests.pipeline.sglang_servers import seer_servers
from tests.pipeline.test_sglang_rollout import GREEDY, PROMPTS, generator, greedy_reference
from tests.pipeline.tiny import TINY_MODEL
from transport.messages import RolloutRecord

HAS_ROUTER = importlib.util.find_spec("sglang_router") is not None
needs_router = pytest.mark.skipif(
    not HAS_ROUTER, reason="sglang-router is not installed (pip install 'seer-rl[router]')"
)
POLICIES = ("divided", "context_aware")


@pytest.fixture(scope="module")
def model_path(tmp_path_factory: pytest.TempPathFactory) -> str:
    path = tmp_path_factory.mktemp("model") / "tiny.safetensors"
    save_model(LlamaModel.random(ModelOptions(**TINY_MODEL).config(), seed=3), path)
    return str(path)


def listing(*urls: str, healthy: bool = True) -> dict[str, Any]:
    return {"workers": [{"url": u, "is_healthy": healthy} for u in urls], "total": len(urls)}


def test_a_server_is_pinned_by_its_place_in_the_routers_listing() -> None:
    routed = listing("http://h:2", "http://h:3/", "http://h:1")
    assert worker_index(routed, "http://h:1") == 2  # the router's order, not ours
    assert worker_index(routed, "http://h:3") == 1  # trailing slashes do not matter
    with pytest.raises(RouterError, match="does not list"):
        worker_index(routed, "http://h:4")
    with pytest.raises(RouterError, match="expected"):
        worker_index({"error": "nope"}, "http://h:1")
    assert is_registered(routed, "http://h:2")
    assert not is_registered(listing("http://h:2", healthy=False), "http://h:2")


def test_the_routers_own_errors_for_a_silent_worker_mean_a_lost_server() -> None:
    def body(code: str) -> bytes:
        return json.dumps({"error": {"type": "x", "code": code, "message": "m"}}).encode()

    assert is_upstream_failure(500, body("call_upstream_request_error"))  # a dead worker
    assert is_upstream_failure(503, body("no_available_workers"))  # an unhealthy target
    assert not is_upstream_failure(500, body("internal_error"))
    assert not is_upstream_failure(400, body("call_upstream_request_error"))
    assert not is_upstream_failure(500, b"<html>")


def test_a_router_url_needs_the_servers_urls() -> None:
    with pytest.raises(ValueError, match="router_url"):
        SGLangOptions(router_url="http://r:1")
    with pytest.raises(ValueError, match="router_url"):
        SGLangOptions(urls=("http://s:1",), router_url="r:1")


def rids_by_server(folder: Path, urls: list[str]) -> list[list[dict[str, Any]]]:
    """What each server was asked to run (tests.pipeline.schema_serve's log), in `urls`
    order; the logs are emptied."""
    out = []
    for url in urls:
        path = folder / f"{url.rsplit(':', 1)[1]}.jsonl"
        lines = path.read_text().splitlines() if path.exists() else []
        path.unlink(missing_ok=True)
        out.append([json.loads(line) for line in lines])
    return out


def request_id(rid: str) -> str:
    """The chunk's request id from its rid (`<id>@<serial>#`, protocol.chunk_rid)."""
    escaped = rid.rsplit("@", 1)[0]
    return escaped.replace("%23", "#").replace("%25", "%")


async def run_policies(
    gen: dict[str, Any], run_dir: Path
) -> dict[str, tuple[list[tuple[int, ...]], RolloutRecord]]:
    config = rollout_config(num_generators=2, chunk_size=8, generator=gen, run_dir=str(run_dir))
    budget = (GREEDY.max_new_tokens,) * 3  # the oracle-free policies: lengths change nothing
    prompts = [dataclasses.replace(p, forced_lens=budget) for p in PROMPTS]
    out = {}
    async with Rollout(config, mode="inprocess") as rollout:
        for policy in POLICIES:
            result = await rollout.generate_with_record(prompts, 3, GREEDY, policy=policy)
            tokens = [s.token_ids for g in result.groups for s in g.samples]
            out[policy] = (tokens, result.record)
    return out


@needs_router
@pytest.mark.timeout(240)
def test_rollouts_through_the_router_equal_direct_ones_and_run_where_placed(
    model_path: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from actors.generator.sglang.router import running_router

    rid_dir = tmp_path / "rids"
    rid_dir.mkdir()
    monkeypatch.setenv("SEER_SERVE_RID_DIR", str(rid_dir))  # the servers log each /generate

    async def main() -> None:
        async with seer_servers(model_path, 2, tmp_path) as servers:
            urls = [s.url for s in servers]
            direct = await run_policies(generator(model_path, urls), tmp_path / "direct")
            direct_rids = rids_by_server(rid_dir, urls)
            with anyio.fail_after(90):
                async with running_router(urls, tmp_path / "router.log") as router_url:
                    gen = generator(model_path, urls)
                    gen["sglang"]["router_url"] = router_url
                    routed = await run_policies(gen, tmp_path / "routed")
            routed_rids = rids_by_server(rid_dir, urls)
        for policy in POLICIES:
            assert routed[policy][0] == direct[policy][0], policy  # the same greedy samples
        assert direct[POLICIES[0]][0] == greedy_reference(model_path, GREEDY)
        # straight to the servers, the backend's requests; through the router, not one of them
        assert all(r["user_agent"] == USER_AGENT for s in direct_rids for r in s)
        assert not any(r["user_agent"] == USER_AGENT for s in routed_rids for r in s)
        # every chunk ran on the server of the generator the scheduler gave it to
        for i, asked in enumerate(routed_rids):
            placed = Counter(
                c.request_id
                for _, record in routed.values()
                for c in record.chunks
                if c.instance == i
            )
            assert placed, f"the scheduler placed nothing on generator {i}"
            assert Counter(request_id(r["rid"]) for r in asked) == placed

    anyio.run(main)


@needs_router
@pytest.mark.timeout(120)
def test_a_server_that_dies_behind_the_router_is_lost_not_an_error(
    model_path: str, tmp_path: Path
) -> None:
    """The router answers 500 `call_upstream_request_error` for a dead worker: the engine
    must treat it as a lost server (its chunks re-queued), not as a refused chunk."""
    from actors.generator.sglang.router import running_router

    options = ServeOptions(eos_token_id=258)
    server = start_server(model_path, "127.0.0.1", 0, options)
    req = ChunkRequest("c;", (3, 4, 5), 4, params=SamplingParams(temperature=0.0))

    async def main() -> None:
        try:
            async with running_router([server.url], tmp_path / "router.log") as router_url:
                opts = SGLangOptions(urls=(server.url,), router_url=router_url)
                model = ModelOptions(**TINY_MODEL, path=model_path)
                engine = SGLangEngine(opts, model, eos_token_id=258)
                with anyio.fail_after(60):
                    await engine.start()
                    assert len((await engine.generate(req)).token_ids) == 4
                    server.stop()
                    with pytest.raises(ServerLostError, match="HTTP 500"):
                        await engine.generate(dataclasses.replace(req, request_id="d;"))
                await engine.aclose()
        finally:
            server.stop()

    anyio.run(main)


def test_seer_run_refuses_a_router_without_server_urls(tmp_path: Path) -> None:
    args = ["run", "--sglang-router", "--out", str(tmp_path / "run")]
    proc = subprocess.run(  # its own process: the command configures logging globally
        [sys.executable, "-m", "pipeline.cli", *args],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=Path(__file__).parents[2],
    )
    assert proc.returncode == 2
    assert "--sglang-router needs SGLang servers given by URL" in proc.stderr
