"""`seer serve` over real HTTP (uvicorn on 127.0.0.1, httpx): SGLang 0.5.23's /generate and
control API over the built-in engine; every /generate request and response judged by SGLang's
own schema (CheckedClient)."""

from __future__ import annotations

import json
import re
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import replace
from pathlib import Path
from typing import Any

import httpx
import pytest

from actors.model import load_model, save_hf_folder
from actors.trainer import GRPOTrainer
from actors.trainer.checkpoint import save_checkpoint
from pipeline.serve import ServeOptions, ServerHandle, start_server
from pipeline.serve.schema import SchemaError, validate, validate_generate_request
from tests.pipeline.serve_util import (
    OPTIONS,
    CheckedClient,
    engine_greedy,
    greedy_body,
    in_background,
    save_tiny,
    sse_frames,
)

pytestmark = pytest.mark.timeout(120)
PROMPTS = [[257, 7, 258 - 1, 3], [257, 42, 1, 2, 3, 4], [257, 200], [257, 9, 9, 9, 9, 9, 9, 9]]
SLOW = replace(OPTIONS, step_delay_s=0.02)  # 20 ms per engine step: requests stay in flight


@pytest.fixture(scope="module")
def model_path(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return save_tiny(tmp_path_factory.mktemp("serve") / "tiny.safetensors")


@pytest.fixture(scope="module")
def other_weights(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The same shape, other weights, as a Hugging Face folder (what SGLang loads)."""
    root = tmp_path_factory.mktemp("other")
    save_hf_folder(load_model(save_tiny(root / "seed1.safetensors", seed=1)), root / "hf")
    return root / "hf"


@pytest.fixture(scope="module")
def server(model_path: Path) -> Iterator[ServerHandle]:
    with start_server(str(model_path), "127.0.0.1", 0, OPTIONS) as handle:
        yield handle


@pytest.fixture
def slow(model_path: Path) -> Iterator[ServerHandle]:
    with start_server(str(model_path), "127.0.0.1", 0, SLOW) as handle:
        yield handle


@pytest.fixture
def client(server: ServerHandle) -> Iterator[CheckedClient]:
    c = CheckedClient(server.url)
    yield c
    c.close()


def test_greedy_generate_equals_the_engine_for_concurrent_requests(
    client: CheckedClient, model_path: Path
) -> None:
    expected = engine_greedy(model_path, PROMPTS, 12)
    with ThreadPoolExecutor(len(PROMPTS)) as pool:
        bodies = [greedy_body(p, 12, f"g{i}:0#") for i, p in enumerate(PROMPTS)]
        responses = list(pool.map(client.generate, bodies))
    for i, (response, tokens) in enumerate(zip(responses, expected, strict=True)):
        assert response.status_code == 200
        body = response.json()
        meta = body["meta_info"]
        assert body["output_ids"] == tokens
        assert meta["id"] == f"g{i}:0#"
        assert meta["prompt_tokens"] == len(PROMPTS[i])
        assert meta["completion_tokens"] == len(tokens)
        assert [e[1] for e in meta["output_token_logprobs"]] == tokens
        assert all(len(e) == 3 and e[0] <= 0 for e in meta["output_token_logprobs"])
        if tokens[-1] == 258:
            assert meta["finish_reason"] == {"type": "stop", "matched": 258}
        else:
            assert meta["finish_reason"] == {"type": "length", "length": 12}
        assert meta["weight_version"] == "default"
        assert meta["weight_versions"] == [{"version": "default", "start": 0, "end": len(tokens)}]


def test_batch_request_returns_a_list_in_order(client: CheckedClient, model_path: Path) -> None:
    expected = engine_greedy(model_path, PROMPTS[:2], 6)
    body = greedy_body(PROMPTS[0], 6, "x")
    body.update(input_ids=PROMPTS[:2], rid=["b0", "b1"])
    response = client.generate(body)
    assert response.status_code == 200
    out = response.json()
    assert [o["meta_info"]["id"] for o in out] == ["b0", "b1"]
    assert [o["output_ids"] for o in out] == expected


def test_next_chunk_resumes_on_the_cached_prefix(client: CheckedClient, model_path: Path) -> None:
    [whole] = engine_greedy(model_path, [[257, 5, 6]], 10)
    first = client.generate(greedy_body([257, 5, 6], 4, "c:0:0#")).json()
    assert first["meta_info"]["finish_reason"] == {"type": "length", "length": 4}
    resume = [257, 5, 6, *first["output_ids"]]
    before = engine_state(client)
    second = client.generate(greedy_body(resume, 6, "c:0:1#")).json()
    assert second["meta_info"]["cached_tokens"] == len(resume) - 1  # only the last is new
    assert first["output_ids"] + second["output_ids"] == whole
    # /server_info shows the engine's side: the parked KV was taken, nothing prefilled
    after = engine_state(client)
    assert after["num_parked_hits"] == before["num_parked_hits"] + 1
    assert after["num_prefill_tokens"] == before["num_prefill_tokens"]
    assert after["num_generated_tokens"] == before["num_generated_tokens"] + 6


def engine_state(client: CheckedClient) -> dict[str, int]:
    """The engine's counters, as `/server_info` reports them (`internal_states`)."""
    return dict(client.http.get("/server_info").json()["internal_states"][0])


def test_stream_sends_cumulative_frames_then_done(client: CheckedClient, model_path: Path) -> None:
    [tokens] = engine_greedy(model_path, [PROMPTS[1]], 10)
    frames = client.stream(greedy_body(PROMPTS[1], 10, "s:0#"))
    assert len(frames) == len(tokens)  # one frame per decode step (no drafts)
    for n, frame in enumerate(frames, start=1):
        assert frame["output_ids"] == tokens[:n]
        assert len(frame["meta_info"]["output_token_logprobs"]) == n
        assert (frame["meta_info"]["finish_reason"] is None) == (n < len(frames))
    assert frames[-1]["meta_info"]["finish_reason"]["type"] in ("stop", "length")


@pytest.mark.parametrize(
    ("sampling", "shape"),
    [
        ({"max_tokens": 8}, "contract"),  # SGLang's name is max_new_tokens
        ({"max_new_tokens": 8.0}, "contract"),  # a float where an i64 belongs
        ({"seed": 1}, "contract"),
        ({"top_k": 0}, "message"),  # -1 or >= 1
        ({"max_new_tokens": 253}, "message"),  # 4 + 253 > 256: context overflow
        ({"stop": ["x"]}, "message"),  # stop strings: not implemented here
    ],
)
def test_bad_requests_get_sglangs_400(
    client: CheckedClient, sampling: dict[str, Any], shape: str
) -> None:
    body = {"input_ids": [257, 1, 2, 3], "sampling_params": sampling}
    response = client.http.post("/generate", json=body)
    assert response.status_code == 400
    error = response.json()["error"]
    if shape == "contract":  # the gate's text, as SGLang's own schema refuses it too
        assert isinstance(error, str)
        with pytest.raises(SchemaError):
            validate_generate_request(body)
    else:
        assert isinstance(error["message"], str) and error["message"]


def test_a_streaming_request_that_fails_validation_gets_an_error_frame(
    client: CheckedClient,
) -> None:
    """SGLang answers 200 and streams {"error": {...}} then [DONE] (http_server.py)."""
    body = {"input_ids": [257, 1], "sampling_params": {"top_k": 0}, "stream": True}
    with client.http.stream("POST", "/generate", json=body) as response:
        assert response.status_code == 200
        frames = list(sse_frames(response.iter_text()))
    assert frames[-1] == "[DONE]" and len(frames) == 2
    frame = json.loads(frames[0])
    validate("GenerateStreamError", frame)
    assert frame["error"]["code"] == 400 and "top_k" in frame["error"]["message"]
    bad_gate = {**body, "sampling_params": {"max_tokens": 1}}  # the gate: 400 even so
    assert client.http.post("/generate", json=bad_gate).status_code == 400


def test_a_prompt_that_fills_the_context_is_refused(client: CheckedClient) -> None:
    body = {"input_ids": [1] * 256, "sampling_params": {"max_new_tokens": 1}}
    response = client.generate(body)
    assert response.status_code == 400
    assert "context length" in response.json()["error"]["message"]
    garbage = client.http.post("/generate", content=b"{not json")
    assert garbage.status_code == 400


def test_loads_report_sglang_fields(client: CheckedClient) -> None:
    response = client.http.get("/v1/loads", params={"include": "core"})
    assert response.status_code == 200
    body = response.json()
    [rank] = body["loads"]
    for key in ("num_running_reqs", "num_waiting_reqs", "num_used_tokens"):
        assert rank[key] == 0, key  # idle: cached prefixes count as evictable, not used
    assert rank["max_total_num_tokens"] == ServeOptions().kv_budget_tokens
    assert rank["max_running_requests"] == ServeOptions().max_batch
    assert "memory" not in rank  # include=core: the flat fields only
    memory = client.http.get("/v1/loads").json()["loads"][0]["memory"]  # default: all
    assert memory["token_capacity"] == rank["max_total_num_tokens"]
    assert client.http.get("/v1/loads", params={"include": "bogus"}).status_code == 400
    for path in ("/abort_request", "/pause_generation", "/update_weights_from_disk"):
        assert client.http.post(path, json=[1]).status_code == 400, path  # not an object
    for path in ("/health", "/health_generate", "/ready"):
        assert client.http.get(path).status_code == 200, path
    info = client.http.get("/server_info").json()
    assert info["max_context_length"] == 256 and info["version"] == "0.5.23"


# ---- in-flight behaviour on a deliberately slow server (20 ms per step) ---------------------


def _wait_for(predicate: Callable[[], bool], what: str, timeout_s: float = 30.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not predicate():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.01)


def _running(c: CheckedClient) -> int:
    return int(c.http.get("/v1/loads").json()["loads"][0]["num_running_reqs"])


def _waiting(c: CheckedClient) -> int:
    return int(c.http.get("/v1/loads").json()["loads"][0]["num_waiting_reqs"])


def _long(prompt: list[int], max_new: int, rid: str) -> dict[str, Any]:
    body = greedy_body(prompt, max_new, rid)
    body["sampling_params"]["ignore_eos"] = True
    return body


def test_abort_by_rid_prefix_returns_partial_output(slow: ServerHandle) -> None:
    c = CheckedClient(slow.url)
    c.http.post("/pause_generation", json={"mode": "in_place"})  # they start together
    jobs = {
        rid: in_background(lambda rid=rid: c.generate(_long([257, 3], 200, rid)).json())
        for rid in ("g:0:0#", "g:1:0#", "h:0:0#")
    }
    _wait_for(lambda: _waiting(c) == 3, "three requests at the gate")
    c.http.post("/continue_generation", json={})
    _wait_for(lambda: _running(c) == 3, "three requests in one batch")
    assert c.http.get("/health_generate").status_code == 200  # a busy engine is healthy
    again = c.http.post("/generate", json=_long([257, 3], 5, "g:0:0#"))
    assert again.status_code == 400 and "Duplicate" in again.json()["error"]["message"]
    assert c.http.post("/abort_request", json={"rid": "g:"}).status_code == 200
    for rid in ("g:0:0#", "g:1:0#"):
        out = jobs[rid].result(timeout=30)
        assert out["meta_info"]["finish_reason"]["type"] == "abort"
        assert 0 < len(out["output_ids"]) < 200
        assert len(out["meta_info"]["output_token_logprobs"]) == len(out["output_ids"])
    assert (
        c.http.post("/abort_request", json={"rid": "h:0:0#", "abort_all": False}).status_code == 200
    )
    assert jobs["h:0:0#"].result(timeout=30)["meta_info"]["finish_reason"]["type"] == "abort"
    c.close()


def test_pause_abort_blocks_new_requests_until_continue(slow: ServerHandle) -> None:
    c = CheckedClient(slow.url)
    running = in_background(lambda: c.generate(_long([257, 4], 200, "p:0#")).json())
    _wait_for(lambda: _running(c) == 1, "the request to run")
    paused = c.http.post("/pause_generation", json={"mode": "abort"})
    assert paused.json() == {"message": "Generation paused successfully.", "status": "ok"}
    out = running.result(timeout=30)
    assert out["meta_info"]["finish_reason"]["type"] == "abort"
    assert 0 < len(out["output_ids"]) < 200
    blocked = in_background(lambda: c.generate(_long([257, 4], 3, "p:1#")).json())
    _wait_for(lambda: _waiting(c) == 1, "gate")
    assert not blocked.done()  # /generate blocks while paused
    assert c.http.get("/ready").status_code == 503
    assert c.http.post("/continue_generation", json={}).status_code == 200
    assert blocked.result(timeout=30)["meta_info"]["finish_reason"]["type"] == "length"
    assert c.http.get("/ready").status_code == 200
    c.close()


def test_pause_retract_requeues_and_finishes_after_continue(slow: ServerHandle) -> None:
    c = CheckedClient(slow.url)
    job = in_background(lambda: c.generate(_long([257, 5], 120, "r:0#")).json())
    _wait_for(lambda: _running(c) == 1, "the request to run")
    assert c.http.post("/pause_generation", json={"mode": "retract"}).status_code == 200
    [rank] = c.http.get("/v1/loads").json()["loads"]
    assert (rank["num_running_reqs"], rank["num_waiting_reqs"]) == (0, 1)
    assert not job.done()
    c.http.post("/continue_generation", json={})
    out = job.result(timeout=30)
    assert out["meta_info"]["finish_reason"] == {"type": "length", "length": 120}
    assert len(out["output_ids"]) == 120
    assert out["meta_info"]["num_retractions"] == 1
    c.close()


def test_queued_request_aborted_at_the_gate_has_sglangs_queued_shape(slow: ServerHandle) -> None:
    c = CheckedClient(slow.url)
    c.http.post("/pause_generation", json={"mode": "in_place"})
    job = in_background(lambda: c.generate(_long([257, 6], 5, "q:0#")).json())
    _wait_for(lambda: _waiting(c) == 1, "gate")
    c.http.post("/abort_request", json={"rid": "q:0#"})
    out = job.result(timeout=30)
    assert out["output_ids"] == []
    assert out["meta_info"]["finish_reason"]["type"] == "abort"
    assert "prompt_tokens" not in out["meta_info"]
    c.http.post("/continue_generation", json={})
    c.close()


def test_in_place_weight_update_splits_weight_versions(
    slow: ServerHandle, other_weights: Path
) -> None:
    c = CheckedClient(slow.url)
    job = in_background(lambda: c.generate(_long([257, 8], 120, "w:0#")).json())
    _wait_for(lambda: _running(c) == 1, "the request to run")
    c.http.post("/pause_generation", json={"mode": "in_place"})
    update = {"model_path": str(other_weights), "weight_version": "v2", "flush_cache": True}
    refused = c.http.post("/update_weights_from_disk", json=update)
    assert refused.status_code == 400  # SGLang: weights updated, cache not flushed
    assert refused.json()["success"] is False
    update["flush_cache"] = False
    done = c.http.post("/update_weights_from_disk", json=update)
    assert done.status_code == 200 and done.json()["success"] is True
    c.http.post("/continue_generation", json={})
    meta = job.result(timeout=30)["meta_info"]
    [old, new] = meta["weight_versions"]
    assert old["version"] == "default" and new["version"] == "v2"
    assert old["start"] == 0 < old["end"] == new["start"] < new["end"] == 120
    assert meta["weight_version"] == "v2"
    c.close()


def test_flush_cache_is_refused_while_busy_and_waits_with_timeout(slow: ServerHandle) -> None:
    c = CheckedClient(slow.url)
    job = in_background(lambda: c.generate(_long([257, 9], 120, "f:0#")).json())
    _wait_for(lambda: _running(c) == 1, "the request to run")
    assert c.http.post("/flush_cache").status_code == 400
    assert c.http.post("/flush_cache", params={"timeout": "0.01"}).status_code == 400
    assert c.http.post("/flush_cache", params={"timeout": "30"}).status_code == 200
    assert _running(c) == 0  # it waited for the request to end
    assert job.result(timeout=30)["meta_info"]["finish_reason"]["type"] == "length"
    c.close()


def test_update_weights_from_disk_changes_outputs_and_version(
    model_path: Path, other_weights: Path, tmp_path: Path
) -> None:
    with start_server(str(model_path), "127.0.0.1", 0, OPTIONS) as handle:
        c = CheckedClient(handle.url)
        prompt = [257, 11, 12]
        [before] = engine_greedy(model_path, [prompt], 8)
        [after] = engine_greedy(save_tiny(tmp_path / "seed1.safetensors", seed=1), [prompt], 8)
        assert before != after
        assert c.generate(greedy_body(prompt, 8, "u:0#")).json()["output_ids"] == before
        update = {"model_path": str(other_weights), "weight_version": "v1"}
        response = c.http.post("/update_weights_from_disk", json=update)
        assert response.status_code == 200 and response.json()["success"] is True
        out = c.generate(greedy_body(prompt, 8, "u:1#")).json()
        assert out["output_ids"] == after
        assert out["meta_info"]["weight_version"] == "v1"
        assert c.http.get("/model_info").json()["weight_version"] == "v1"
        bad = c.http.post("/update_weights_from_disk", json={"model_path": str(tmp_path / "no")})
        assert bad.status_code == 400 and bad.json()["success"] is False
        assert c.generate(greedy_body(prompt, 8, "u:2#")).json()["output_ids"] == after
        trainer = GRPOTrainer(load_model(model_path), lr=1e-3)  # the first weights again,
        save_checkpoint(trainer, tmp_path / "ckpt", iteration=0)  # as a trainer checkpoint
        update = {"model_path": str(tmp_path / "ckpt"), "weight_version": "v2"}
        assert c.http.post("/update_weights_from_disk", json=update).json()["success"] is True
        assert c.generate(greedy_body(prompt, 8, "u:3#")).json()["output_ids"] == before
        relabel = {"new_version": "v9", "abort_all_requests": False}
        assert c.http.post("/update_weight_version", json=relabel).json()["success"] is True
        assert c.http.get("/model_info").json()["weight_version"] == "v9"
        c.close()


def test_seer_serve_command_serves_an_hf_folder(other_weights: Path, tmp_path: Path) -> None:
    """`seer serve --model <HF folder> --port 0` as a subprocess: URL on its first line,
    healthy, generating what the engine generates on those weights; stops on SIGTERM."""
    command = [sys.executable, "-m", "pipeline.cli", "serve", "--model-path", str(other_weights)]
    proc = subprocess.Popen(
        [*command, "--port", "0"], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    )
    try:
        lines: Future[str] = in_background(lambda: proc.stdout.readline() if proc.stdout else "")
        first = lines.result(timeout=60)
        match = re.search(r"listening on (http://127\.0\.0\.1:\d+)", first)
        assert match, first
        c = CheckedClient(match.group(1))
        assert c.http.get("/health_generate").status_code == 200
        reference = save_tiny(tmp_path / "seed1.safetensors", seed=1)
        [expected] = engine_greedy(reference, [[257, 21, 22]], 6)
        out = c.generate(greedy_body([257, 21, 22], 6, "cli:0#")).json()
        assert out["output_ids"] == expected
        assert c.http.get("/model_info").json()["model_path"] == str(other_weights)
        c.close()
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=10)
    assert proc.returncode in (0, -signal.SIGTERM)  # uvicorn re-raises it after shutdown


@pytest.mark.parametrize("stream", [False, True])
def test_a_client_that_hangs_up_has_its_request_aborted(slow: ServerHandle, stream: bool) -> None:
    c = CheckedClient(slow.url)
    body = _long([257, 10], 250, "d:0#")
    if stream:
        with c.http.stream("POST", "/generate", json={**body, "stream": True}) as response:
            next(response.iter_lines())  # the first frame: it is running; then hang up
    else:
        with pytest.raises(httpx.ReadTimeout):
            c.http.post("/generate", json=body, timeout=0.5)
    _wait_for(lambda: _running(c) == 0, "the abandoned request to end")
    generated = slow.bridge.engine.counters().num_generated_tokens
    assert generated < 250  # it did not run to its end
    c.close()


def test_api_key_guards_everything_but_health(model_path: Path) -> None:
    options = replace(OPTIONS, api_key="s3cret")
    with start_server(str(model_path), "127.0.0.1", 0, options) as handle:
        c = CheckedClient(handle.url)
        body = greedy_body([257, 1], 2, "k:0#")
        assert c.http.post("/generate", json=body).status_code == 401
        wrong = {"Authorization": "Bearer nope"}
        assert c.http.get("/model_info", headers=wrong).json() == {"error": "Unauthorized"}
        assert c.http.get("/health_generate").status_code == 200
        assert c.http.get("/ready").status_code == 200
        good = {"Authorization": "Bearer s3cret"}
        assert c.http.post("/generate", json=body, headers=good).status_code == 200
        c.close()


def test_a_batch_streams_frames_tagged_by_index(client: CheckedClient, model_path: Path) -> None:
    expected = engine_greedy(model_path, PROMPTS[:2], 5)
    body = greedy_body(PROMPTS[0], 5, "x")
    body.update(input_ids=PROMPTS[:2], rid=["sb0", "sb1"])
    frames = client.stream(body)
    for index in (0, 1):
        mine = [f for f in frames if f["index"] == index]
        assert mine[-1]["output_ids"] == expected[index]
        assert [f["meta_info"]["finish_reason"] is None for f in mine].count(False) == 1


def test_an_unpaused_weight_update_waits_for_running_requests(
    slow: ServerHandle, other_weights: Path
) -> None:
    """SGLang's model-update lock: requests in flight finish on the old weights first."""
    c = CheckedClient(slow.url)
    job = in_background(lambda: c.generate(_long([257, 12], 30, "lock:0#")).json())
    _wait_for(lambda: _running(c) == 1, "the request to run")
    update = {"model_path": str(other_weights), "weight_version": "v7"}
    assert c.http.post("/update_weights_from_disk", json=update).json()["success"] is True
    out = job.result(timeout=30)
    assert out["meta_info"]["finish_reason"] == {"type": "length", "length": 30}
    assert out["meta_info"]["weight_versions"] == [{"version": "default", "start": 0, "end": 30}]
    after = c.generate(_long([257, 12], 2, "lock:1#")).json()
    assert after["meta_info"]["weight_version"] == "v7"
    c.close()


def test_incremental_streaming_sends_only_new_tokens(model_path: Path) -> None:
    [tokens] = engine_greedy(model_path, [PROMPTS[3]], 9)
    options = replace(OPTIONS, incremental_streaming_output=True)
    with start_server(str(model_path), "127.0.0.1", 0, options) as handle:
        c = CheckedClient(handle.url)
        assert c.http.get("/server_info").json()["incremental_streaming_output"] is True
        frames = c.stream(greedy_body(PROMPTS[3], 9, "inc:0#", return_prompt_token_ids=True))
        c.close()
    assert [t for f in frames for t in f["output_ids"]] == tokens
    logprobs = [e for f in frames for e in f["meta_info"]["output_token_logprobs"]]
    assert [e[1] for e in logprobs] == tokens
    assert frames[-1]["meta_info"]["completion_tokens"] == len(tokens)
    assert frames[0]["prompt_token_ids"] == PROMPTS[3]


def test_without_a_model_it_serves_seer_runs_cached_warm_start(tmp_path: Path) -> None:
    from pipeline.cli.serve import serve_default_model
    from pipeline.rl.config import RunConfig, generator_options
    from pipeline.serve.server import load_serving_model
    from pipeline.tasks import get_task
    from pipeline.tasks.warmstart import warm_start_path

    options = ServeOptions(default_model=serve_default_model(str(tmp_path)))
    random_model, eos, source = load_serving_model(options)
    assert source == "" and eos == 258  # no warm start cached: a random model of that shape
    cfg = RunConfig(cache_dir=str(tmp_path))
    task = get_task(cfg.task)
    shape = generator_options(cfg, task, "").model.config()
    assert random_model.config == shape
    cached = warm_start_path(task, shape, cache_dir=tmp_path, steps=cfg.warm_start_steps)
    save_tiny(tmp_path / "other.safetensors", seed=9)
    (tmp_path / "other.safetensors").rename(cached)
    model, _, source = load_serving_model(options)
    assert source == str(cached) and model.config.hidden == 64  # the file's, not the shape's
    with pytest.raises(ValueError, match="needs a model path"):
        load_serving_model(ServeOptions())  # serve alone knows no default model


def test_a_pause_releases_a_weight_update_waiting_for_idle(
    slow: ServerHandle, other_weights: Path
) -> None:
    c = CheckedClient(slow.url)
    job = in_background(lambda: c.generate(_long([257, 13], 120, "pw:0#")).json())
    _wait_for(lambda: _running(c) == 1, "the request to run")
    update = {"model_path": str(other_weights), "weight_version": "v3", "flush_cache": False}
    waiting = in_background(lambda: c.http.post("/update_weights_from_disk", json=update))
    c.http.post("/pause_generation", json={"mode": "in_place"})
    assert waiting.result(timeout=30).json()["success"] is True  # landed under the request
    c.http.post("/continue_generation", json={})
    versions = [s["version"] for s in job.result(timeout=60)["meta_info"]["weight_versions"]]
    assert versions in (["default", "v3"], ["v3"])  # "v3" alone if it landed before token 1
    c.close()
