"""SGLang with a real model's needs, against `seer serve` in this process (real HTTP, real
gloo): the distributed weight update (`/init_weights_update_group`, then
`/begin_weight_update` .. `/update_weights_from_distributed` .. `/end_weight_update`), every
control body the backend sends decoded by the request class SGLang 0.5.23's handler takes
(read from the wheel); the admin API key as SGLang checks it; the context length from
`/server_info`; and the launch flags (`--skip-tokenizer-init` / `--tokenizer-path`,
`--context-length` only when asked)."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest
import torch

from actors.generator import ChunkRequest, SamplingParams
from actors.generator.builtin import EngineConfig, TorchEngine
from actors.generator.errors import ServerError
from actors.generator.sglang.client import ADMIN_ROUTES, SentRequest
from actors.generator.sglang.distributed import WeightGroup, tensor_meta
from actors.generator.sglang.engine import SGLangEngine, context_len_of
from actors.generator.sglang.launch import (
    ServerLaunchError,
    fill_command,
    free_port,
    server_args,
)
from actors.generator.sglang.options import DEFAULT_COMMAND, SGLangOptions
from actors.model import LlamaModel, ModelOptions
from pipeline.serve import ServeOptions, start_server
from pipeline.serve.auth import ADMIN_ROUTES as SERVE_ADMIN_ROUTES
from pipeline.serve.schema import (
    SchemaError,
    admin_routes,
    route_request_classes,
    validate_control_request,
)
from tests.pipeline.serve_util import EOS, TINY, save_tiny

pytestmark = pytest.mark.timeout(120)
PROMPT = (5, 17, 33, 2)
NEW = 6


@pytest.fixture(scope="module")
def model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return save_tiny(tmp_path_factory.mktemp("m") / "tiny.safetensors", seed=5)


def reference(model: LlamaModel) -> tuple[tuple[int, ...], tuple[float, ...]]:
    """The built-in engine's greedy tokens and logprobs for PROMPT (no server)."""
    engine = TorchEngine(model, EngineConfig(eos_token_id=EOS, profile=False))
    greedy = SamplingParams(temperature=0.0, ignore_eos=True)
    engine.add(ChunkRequest("r", PROMPT, NEW, params=greedy))
    while engine.has_work():
        for chunk in engine.poll().finished:
            return chunk.token_ids, chunk.logprobs
    raise AssertionError("no result")


def chunk(version: int) -> ChunkRequest:
    params = SamplingParams(temperature=0.0, ignore_eos=True)
    return ChunkRequest("s0", PROMPT, NEW, params=params, weight_version=version)


class ControlJudge:
    """A request hook: every control body the backend sends must decode as the class
    SGLang's handler for that route takes; the routes seen, in order."""

    def __init__(self) -> None:
        self.paths: list[str] = []

    async def __call__(self, request: SentRequest) -> None:
        path = request.path.partition("?")[0]
        if path in route_request_classes():
            validate_control_request(path, json.loads(request.content or b"{}"))
            self.paths.append(path)


# ---- the distributed weight update end to end -----------------------------------------------


def test_a_distributed_weight_update_over_gloo_reaches_seer_serve(model: Path) -> None:
    new = LlamaModel.random(TINY, seed=11)
    old_tokens, old_logprobs = reference(LlamaModel.random(TINY, seed=5))
    new_tokens, new_logprobs = reference(new)
    judge = ControlJudge()
    options = ServeOptions(max_batch=4, eos_token_id=EOS)

    async def main() -> None:
        with start_server(str(model), port=0, options=options) as handle:
            opts = SGLangOptions(urls=(handle.url,), weight_sync="distributed")
            engine = SGLangEngine(
                opts,
                ModelOptions(path=str(model)),
                eos_token_id=EOS,
                event_hooks={"request": [judge]},
            )
            await engine.start()
            try:
                before = await engine.generate(chunk(0))
                await engine.update_weights(new.state_dict(), 1)
                after = await engine.generate(chunk(1))
                async with httpx.AsyncClient(base_url=handle.url) as http:
                    info = (await http.get("/model_info")).json()
            finally:
                await engine.aclose()
        assert before.token_ids == old_tokens
        assert before.logprobs == pytest.approx(old_logprobs, abs=1e-4)
        assert after.token_ids == new_tokens  # generation reflects the broadcast weights
        assert after.logprobs == pytest.approx(new_logprobs, abs=1e-4)
        assert after.logprobs != pytest.approx(before.logprobs, abs=1e-3)
        assert info["weight_version"] == "1" and engine.weight_version == 1

    anyio.run(main)
    update = [
        "/pause_generation",
        "/begin_weight_update",
        "/update_weights_from_distributed",
        "/end_weight_update",
        "/continue_generation",
    ]
    assert judge.paths[0] == "/init_weights_update_group"
    assert judge.paths[-6:] == [*update, "/destroy_weights_update_group"]


def test_seer_serve_refuses_a_distributed_update_outside_a_session(model: Path) -> None:
    with start_server(str(model), port=0, options=ServeOptions(eos_token_id=EOS)) as handle:
        http = httpx.Client(base_url=handle.url)
        meta = tensor_meta({"model.norm.weight": torch.ones(TINY.hidden)})
        lone = http.post("/update_weights_from_distributed", json=meta)
        end = http.post("/end_weight_update", json={})
        assert http.post("/begin_weight_update", json={}).json()["success"]
        twice = http.post("/begin_weight_update", json={})
        no_group = http.post("/update_weights_from_distributed", json=meta)
        http.close()
    assert lone.status_code == 400 and "between begin_weight_update()" in lone.json()["message"]
    assert end.status_code == 400 and "no weight-update session" in end.json()["message"]
    assert twice.status_code == 400 and "already open" in twice.json()["message"]
    assert no_group.status_code == 400 and "init_weights_update_group" in no_group.text


def test_our_rank_0_meets_a_rank_that_joins_as_sglang_does() -> None:
    """The server side joined with torch's `_new_process_group_helper`, as SGLang's
    `init_custom_process_group` does: our store layout must match it."""
    c10d = pytest.importorskip("torch.distributed.distributed_c10d")
    helper = getattr(c10d, "_new_process_group_helper", None)
    if helper is None:
        pytest.skip("this torch has no _new_process_group_helper")
    port, name, timeout = free_port(), "seer_interop", timedelta(seconds=20)
    got: dict[str, torch.Tensor] = {}

    def sglang_side() -> None:
        store, rank, _ = next(c10d.rendezvous(f"tcp://127.0.0.1:{port}", 1, 2, timeout=timeout))
        store.set_timeout(timeout)
        pg, _ = helper(
            2, rank, [], c10d.Backend("gloo"), c10d.PrefixStore(name, store),
            group_name=name, backend_options=None, timeout=timeout, device_id=None,
        )  # fmt: skip
        c10d._world.pg_group_ranks[pg] = {0: 0, 1: 1}
        got["t"] = torch.empty(2, 3)
        torch.distributed.broadcast(got["t"], src=0, group=pg)

    thread = threading.Thread(target=sglang_side)
    thread.start()
    group = WeightGroup.open(
        master_address="127.0.0.1", master_port=port, rank=0, world_size=2, group_name=name,
        timeout_s=20.0,
    )  # fmt: skip
    group.send({"w": torch.arange(6.0).reshape(2, 3)})
    thread.join(30)
    group.close()
    assert torch.equal(got["t"], torch.arange(6.0).reshape(2, 3))


# ---- schema ---------------------------------------------------------------------------------


def test_control_bodies_follow_the_wheels_request_classes() -> None:
    routes = route_request_classes()
    assert routes["/update_weights_from_distributed"] == "UpdateWeightsFromDistributedReqInput"
    assert routes["/init_weights_update_group"] == "InitWeightsUpdateGroupReqInput"
    assert routes["/begin_weight_update"] == "BeginWeightUpdateReqInput"
    meta = tensor_meta({"model.norm.weight": torch.ones(4, dtype=torch.bfloat16)})
    decoded = validate_control_request(
        "/update_weights_from_distributed", {**meta, "weight_version": "3"}
    )
    assert decoded.dtypes == ["bfloat16"] and decoded.shapes == [[4]] and decoded.flush_cache
    bad = [
        (
            "/init_weights_update_group",
            {"master_address": "h", "master_port": "1", "rank_offset": 1, "world_size": 2},
        ),
        ("/init_weights_update_group", {"master_address": "h", "master_port": 1, "rank_offset": 1}),
        ("/update_weights_from_distributed", {**meta, "version": "3"}),  # no such field
        ("/update_weights_from_distributed", {**meta, "shapes": [[4.0]]}),
        ("/pause_generation", {"mode": "pause"}),
    ]
    for path, body in bad:
        with pytest.raises(SchemaError):
            validate_control_request(path, body)


def test_admin_routes_are_the_ones_sglang_marks_admin_optional() -> None:
    marked = admin_routes()
    assert marked >= SERVE_ADMIN_ROUTES | ADMIN_ROUTES
    served = {
        "/abort_request", "/pause_generation", "/continue_generation", "/flush_cache",
        "/update_weights_from_disk", "/update_weight_version", "/generate", "/model_info",
        "/server_info", "/v1/loads", "/init_weights_update_group", "/begin_weight_update",
        "/destroy_weights_update_group", "/end_weight_update", "/update_weights_from_distributed",
    }  # fmt: skip
    assert served & marked == SERVE_ADMIN_ROUTES == ADMIN_ROUTES


# ---- keys -----------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def keyed(model: Path) -> Iterator[str]:
    options = ServeOptions(eos_token_id=EOS, api_key="plain", admin_api_key="admin")
    with start_server(str(model), port=0, options=options) as handle:
        yield handle.url


def test_the_admin_key_opens_control_routes_and_only_them(keyed: str) -> None:
    def post(path: str, key: str | None, body: dict[str, Any]) -> int:
        headers = {"Authorization": f"Bearer {key}"} if key else {}
        return httpx.post(f"{keyed}{path}", json=body, headers=headers).status_code

    generate = {"input_ids": [1, 2], "sampling_params": {"max_new_tokens": 1}}
    assert post("/pause_generation", "plain", {}) == 401  # SGLang: the plain key is refused
    assert post("/pause_generation", None, {}) == 401
    assert post("/pause_generation", "admin", {}) == 200
    assert post("/continue_generation", "admin", {}) == 200
    assert post("/generate", "admin", generate) == 401  # the admin key opens no normal route
    assert post("/generate", "plain", generate) == 200
    assert httpx.get(f"{keyed}/health").status_code == 200


def test_the_backend_sends_each_key_where_it_belongs(keyed: str, model: Path) -> None:
    async def main() -> None:
        opts = SGLangOptions(urls=(keyed,), api_key="plain", admin_api_key="admin")
        engine = SGLangEngine(opts, ModelOptions(path=str(model)), eos_token_id=EOS)
        await engine.start()  # /server_info (plain), /update_weight_version (admin)
        try:
            result = await engine.generate(chunk(0))
            await engine.update_weights(str(model), 2)  # pause .. disk .. continue: admin
        finally:
            await engine.aclose()
        assert len(result.token_ids) == NEW and engine.weight_version == 2

    anyio.run(main)


# ---- context length -------------------------------------------------------------------------


def test_seer_serve_reports_the_context_as_sglang_does(model: Path) -> None:
    with start_server(str(model), port=0, options=ServeOptions(eos_token_id=EOS)) as handle:
        info = httpx.get(f"{handle.url}/server_info").json()
    assert info["context_length"] is None  # as SGLang without --context-length
    assert info["max_req_input_len"] == min(TINY.max_context - 1, 65536 - 1) - 5
    options = ServeOptions(eos_token_id=EOS, context_length=100, kv_budget_tokens=80)
    with start_server(str(model), port=0, options=options) as handle:
        info = httpx.get(f"{handle.url}/server_info").json()
        prompt = {"input_ids": [1] * 74, "sampling_params": {"max_new_tokens": 1}}
        refused = httpx.post(f"{handle.url}/generate", json=prompt)
        prompt["input_ids"] = [1] * 73
        taken = httpx.post(f"{handle.url}/generate", json=prompt)

        async def attached() -> int:
            opts = SGLangOptions(urls=(handle.url,))
            engine = SGLangEngine(opts, ModelOptions(path=str(model)), eos_token_id=EOS)
            await engine.start()
            await engine.aclose()
            return engine.context_len

        backend_context = anyio.run(attached)
    assert info["context_length"] == 100 and info["max_req_input_len"] == 79 - 5
    assert refused.status_code == 400 and "maximum allowed length (74" in refused.text
    assert taken.status_code == 200
    assert backend_context == 74  # read from /server_info, not the model's 256


def test_the_context_length_comes_from_server_info_never_a_default() -> None:
    assert context_len_of({"max_req_input_len": 32763, "context_length": None}, 0, "u") == 32763
    assert context_len_of({"max_req_input_len": 500, "context_length": 400}, 0, "u") == 400
    assert context_len_of({"max_req_input_len": 500}, 300, "u") == 300
    assert context_len_of({}, 300, "u") == 300
    with pytest.raises(ServerError, match="max_req_input_len"):
        context_len_of({"context_length": None, "max_context_length": 4096}, 0, "u")


# ---- launch flags ---------------------------------------------------------------------------


def test_a_launched_server_gets_the_tokenizer_or_skips_it(tmp_path: Path) -> None:
    folder = str(tmp_path)
    extra = server_args(folder, skip_tokenizer_init=True)
    default = fill_command(DEFAULT_COMMAND, model=folder, host="h", port=1, extra=extra)
    assert default[-1] == "--skip-tokenizer-init" and "--context-length" not in default
    assert SGLangOptions().skip_tokenizer_init and SGLangOptions().weight_sync == "disk"
    with pytest.raises(ServerLaunchError, match="no tokenizer files"):
        server_args(folder, skip_tokenizer_init=False, has_tokenizer=False)
    assert server_args(folder, skip_tokenizer_init=False, context_len=512) == [
        "--tokenizer-path", folder, "--context-length", "512",
    ]  # fmt: skip
    custom = ("{python}", "-m", "x", "--model", "{model}")  # no {server_args}: none added
    assert fill_command(custom, model=folder, host="h", port=1, extra=["--a"])[-1] == folder
