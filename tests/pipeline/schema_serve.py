"""`seer serve` behind SGLang 0.5.23's own schema: `python -m tests.pipeline.schema_serve
[seer serve arguments]`.

An ASGI layer decodes every `/generate` request with SGLang's `GenerateRequest` (a 400 with
SGLang's message when it fails, as SGLang 0.5.22+'s contract gate answers) and every
non-streaming response with `GenerateResponse` (a 500 naming the fault when it fails), and
the body of every control POST (pause, weights, abort, ...) with the `io_struct` class
SGLang's handler for that route takes (a 400 naming the fault), so a test that drives the
SGLang backend against these servers fails on any request or response outside the contract.

With `SEER_SERVE_RID_DIR=DIR` in its environment it also appends one JSON line per valid
`/generate` request to `DIR/<its port>.jsonl` (`rid`, and the `user-agent` it came with):
what this very server was asked to run, for tests that check where each chunk ran.
"""

from __future__ import annotations

import json
import os
import sys
from typing import Any

from pipeline.serve.schema import (
    route_request_classes,
    validate_control_request,
    validate_generate_request,
    validate_generate_response,
)

Scope = dict[str, Any]


class SchemaGate:
    def __init__(self, app: Any) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Any, send: Any) -> None:
        http = scope["type"] == "http"
        if http and scope["method"] == "POST" and scope["path"] in route_request_classes():
            await self._control(scope, receive, send)
            return
        if scope["type"] != "http" or scope["path"] != "/generate":
            await self.app(scope, receive, send)
            return
        body = await _read(receive)
        try:
            request = json.loads(body)
            validate_generate_request(request)
        except ValueError as exc:
            await _answer(send, 400, {"error": f"SGLang schema: {exc}"})
            return
        _log_rid(scope, request)
        if request.get("stream"):
            await self.app(scope, _replay(body, receive), send)
            return
        start: dict[str, Any] = {}
        out = b""

        async def capture(msg: dict[str, Any]) -> None:
            nonlocal out
            if msg["type"] == "http.response.start":
                start.update(msg)
            elif msg["type"] == "http.response.body":
                out += msg.get("body", b"")

        await self.app(scope, _replay(body, receive), capture)
        if start.get("status") == 200:
            try:
                validate_generate_response(json.loads(out))
            except ValueError as exc:
                await _answer(send, 500, {"error": f"response outside SGLang's schema: {exc}"})
                return
        await send(start)
        await send({"type": "http.response.body", "body": out, "more_body": False})

    async def _control(self, scope: Scope, receive: Any, send: Any) -> None:
        body = await _read(receive)
        try:
            validate_control_request(scope["path"], json.loads(body or b"{}"))
        except ValueError as exc:
            await _answer(send, 400, {"error": f"SGLang schema: {exc}"})
            return
        await self.app(scope, _replay(body, receive), send)


async def _read(receive: Any) -> bytes:
    body = b""
    while True:
        msg = await receive()
        body += msg.get("body", b"")
        if not msg.get("more_body"):
            return body


def _log_rid(scope: Scope, request: dict[str, Any]) -> None:
    folder = os.environ.get("SEER_SERVE_RID_DIR")
    if not folder:
        return
    headers = dict(scope.get("headers") or ())
    agent = headers.get(b"user-agent", b"").decode("latin-1")
    port = scope["server"][1]
    with open(os.path.join(folder, f"{port}.jsonl"), "a") as log:
        log.write(json.dumps({"rid": request.get("rid"), "user_agent": agent}) + "\n")


def _replay(body: bytes, receive: Any) -> Any:
    sent = False

    async def replay() -> dict[str, Any]:
        nonlocal sent
        if not sent:
            sent = True
            return {"type": "http.request", "body": body, "more_body": False}
        return await receive()  # type: ignore[no-any-return]

    return replay


async def _answer(send: Any, status: int, payload: dict[str, Any]) -> None:
    data = json.dumps(payload).encode()
    headers = [(b"content-type", b"application/json"), (b"content-length", str(len(data)).encode())]
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": data, "more_body": False})


def main(argv: list[str]) -> int:
    import pipeline.serve.server as server
    from pipeline.cli.main import main as seer

    build_app = server.build_app
    server.build_app = lambda *a, **k: SchemaGate(build_app(*a, **k))  # type: ignore[assignment]
    return seer(["serve", *argv])


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
