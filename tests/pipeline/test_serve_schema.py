"""SGLang 0.5.23's own schema (sglang/api/v1/api_types.py from the wheel `make setup`
downloads) as the judge: it loads, it accepts what `seer serve` sends back and what a client
should send, and it refuses malformed payloads, so the checks in test_serve.py can fail."""

from __future__ import annotations

import copy
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from pipeline.serve import ServerHandle, start_server
from pipeline.serve.schema import (
    SchemaError,
    SGLangWheelMissing,
    api_types,
    validate,
    validate_generate_request,
    validate_generate_response,
    wheel_path,
)
from tests.pipeline.serve_util import OPTIONS, CheckedClient, greedy_body, save_tiny

pytestmark = pytest.mark.timeout(120)


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerHandle]:
    path = save_tiny(tmp_path_factory.mktemp("schema") / "tiny.safetensors")
    with start_server(str(path), "127.0.0.1", 0, OPTIONS) as handle:
        yield handle


@pytest.fixture(scope="module")
def response(server: ServerHandle) -> dict[str, Any]:
    client = CheckedClient(server.url)
    body: dict[str, Any] = client.generate(greedy_body([257, 1, 2], 5, "v:0#")).json()
    client.close()
    return body


def test_the_schema_comes_from_sglangs_wheel() -> None:
    assert wheel_path().name.startswith("sglang-0.5.23-")
    module = api_types()
    assert module.__file__ is not None and "sglang/api/v1/api_types.py" in module.__file__
    for name in ("GenerateRequest", "GenerateResponse", "SamplingParams", "LogprobEntry"):
        assert hasattr(module, name), name


def test_a_missing_wheel_is_a_clear_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SEER_SGLANG_WHEEL_DIR", str(tmp_path))
    with pytest.raises(SGLangWheelMissing, match="make setup"):
        wheel_path()


def test_requests_a_client_should_send_pass() -> None:
    body = greedy_body([257, 1, 2], 8, "grp:3:0#")
    body["sampling_params"].update(top_k=5, top_p=0.9, sampling_seed=7, stop_token_ids=[258])
    decoded = validate_generate_request(body)
    assert decoded.rid == "grp:3:0#" and decoded.sampling_params.max_new_tokens == 8
    batch = {"input_ids": [[1, 2], [3]], "rid": ["a", "b"], "sampling_params": [{}, {}]}
    validate_generate_request(batch)


@pytest.mark.parametrize(
    "sampling",
    [{"max_tokens": 8}, {"max_new_tokens": 8.0}, {"seed": 1}, {"top_k": "5"}],
)
def test_malformed_requests_are_refused(sampling: dict[str, Any]) -> None:
    with pytest.raises(SchemaError):
        validate_generate_request({"input_ids": [1, 2], "sampling_params": sampling})


def test_seer_serve_responses_pass(server: ServerHandle, response: dict[str, Any]) -> None:
    decoded = validate_generate_response(response)
    assert decoded.meta_info.id == "v:0#"
    assert list(decoded.output_ids) == response["output_ids"]
    assert [e.token_id for e in decoded.meta_info.output_token_logprobs] == response["output_ids"]
    assert decoded.meta_info.weight_version == "default"
    client = CheckedClient(server.url)
    for path, type_name in (
        ("/model_info", "GetModelInfoResponse"),
        ("/server_info", "GetServerInfoResponse"),
    ):
        validate(type_name, client.http.get(path).json())
    client.close()


def _broken(response: dict[str, Any], path: list[Any], value: Any) -> dict[str, Any]:
    bad = copy.deepcopy(response)
    node = bad
    for key in path[:-1]:
        node = node[key]
    node[path[-1]] = value
    return bad


@pytest.mark.parametrize(
    ("path", "value"),
    [
        (["meta_info", "output_token_logprobs", 0], [-0.5, 3]),  # slime's fake: pairs
        (["output_ids", 0], 1.5),
        (["meta_info", "weight_versions"], {"version": "v1"}),
        (["meta_info", "completion_tokens"], "5"),
        (["text"], None),
    ],
)
def test_malformed_responses_are_refused(
    response: dict[str, Any], path: list[Any], value: Any
) -> None:
    validate_generate_response(response)
    with pytest.raises(SchemaError):
        validate_generate_response(_broken(response, path, value))
