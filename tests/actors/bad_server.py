"""A tiny misbehaving SGLang server (Starlette under uvicorn, in a thread) for fault tests.

The control routes answer as SGLang 0.5.23 does; `/generate` answers according to `mode`:
"ok" (a one-token greedy answer), "spec" (three tokens ending in a stop, with SGLang's
`spec_*` statistics of a speculating server), "400" (the contract gate's error), "503",
"garbage" (200 with a body that is not JSON), "shape" (JSON that is not a response),
"hang" (answers only when aborted, with finish reason "abort"), "null_logprob" (a good
answer whose logprob is null). `health_mode` "ok", "503" or "hang" does the same for
`/health_generate`. Weights load "from disk" as a version label only
(`/update_weights_from_disk`; setting `version` back to "default" is a restart by the
server's supervisor). Every `/generate` body is recorded.
"""

from __future__ import annotations

import json
import threading
import time
from typing import Any

import anyio
import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, PlainTextResponse, Response
from starlette.routing import Route

from actors.generator.sglang.launch import free_port


class BadServer:
    def __init__(self, mode: str = "ok") -> None:
        self.mode = mode
        self.health_mode = "ok"
        self.bodies: list[dict[str, Any]] = []
        self.aborted: set[str] = set()  # rids `/abort_request` named
        self.version = "default"
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        app = Starlette(
            routes=[
                Route("/generate", self.generate, methods=["POST"]),
                Route("/health_generate", self.health, methods=["GET"]),
                Route("/v1/loads", self.loads, methods=["GET"]),
                Route("/model_info", self.model_info, methods=["GET"]),
                Route("/server_info", self.server_info, methods=["GET"]),
                Route("/update_weight_version", self.update_version, methods=["POST"]),
                Route("/abort_request", self.abort, methods=["POST"]),
                Route("/pause_generation", self.ok, methods=["POST"]),
                Route("/continue_generation", self.ok, methods=["POST"]),
                Route("/update_weights_from_disk", self.update_weights, methods=["POST"]),
            ]
        )
        config = uvicorn.Config(
            app, host="127.0.0.1", port=self.port, log_level="error", lifespan="off"
        )
        self.server = uvicorn.Server(config)
        self.thread = threading.Thread(target=self.server.run, daemon=True)

    def __enter__(self) -> BadServer:
        self.thread.start()
        deadline = time.monotonic() + 10
        while not self.server.started:
            assert time.monotonic() < deadline, "bad server did not start"
            time.sleep(0.01)
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.should_exit = True
        self.server.force_exit = True
        self.thread.join(10)

    async def generate(self, request: Request) -> Response:
        body = json.loads(await request.body())
        self.bodies.append(body)
        mode = self.mode
        if mode == "400":
            return JSONResponse({"error": "unknown field `max_tokens`"}, status_code=400)
        if mode == "503":
            return JSONResponse({"error": {"message": "overloaded"}}, status_code=503)
        if mode == "garbage":
            return PlainTextResponse("<html>oops</html>")
        if mode == "shape":
            return JSONResponse({"text": "x", "meta_info": {"finish_reason": "stop"}})
        if mode == "hang":  # until aborted (`/abort_request`), as SGLang answers then
            with anyio.move_on_after(3600):
                while body["rid"] not in self.aborted:
                    await anyio.sleep(0.01)
            meta = {"id": body["rid"], "finish_reason": {"type": "abort", "message": "aborted"}}
            return JSONResponse({"text": "", "output_ids": [], "meta_info": meta})
        if mode == "spec":
            return JSONResponse(self._spec_answer(body))
        token = (body["input_ids"][-1] + 1) % 7
        meta = {
            "id": body["rid"],
            "finish_reason": {"type": "length", "length": 1},
            "prompt_tokens": len(body["input_ids"]),
            "completion_tokens": 1,
            "cached_tokens": 0,
            "output_token_logprobs": [[None if mode == "null_logprob" else -0.5, token, None]],
            "weight_version": self.version,
        }
        return JSONResponse({"text": "", "output_ids": [token], "meta_info": meta})

    def _spec_answer(self, body: dict[str, Any]) -> dict[str, Any]:
        stop = body["sampling_params"]["stop_token_ids"][0]
        tokens = [1, 2, stop]
        meta = {
            "id": body["rid"],
            "finish_reason": {"type": "stop", "matched": stop},
            "prompt_tokens": len(body["input_ids"]),
            "completion_tokens": 3,
            "output_token_logprobs": [[-0.1, t, None] for t in tokens],
            "weight_version": self.version,
            "spec_verify_ct": 2,
            "spec_accept_length": 1.5,
            "spec_num_proposed_drafts": 4,
            "spec_num_correct_drafts": 1,
        }
        return {"text": "", "output_ids": tokens, "meta_info": meta}

    async def health(self, request: Request) -> Response:
        if self.health_mode == "hang":
            await anyio.sleep(3600)
        if self.health_mode == "503":
            return Response(status_code=503)
        return Response(status_code=200)

    async def loads(self, request: Request) -> Response:
        rank = {"dp_rank": 0, "num_running_reqs": 0, "num_waiting_reqs": 0}
        rank |= {"num_used_tokens": 0, "max_total_num_tokens": 4096, "max_running_requests": 8}
        return JSONResponse({"timestamp": time.time(), "loads": [rank]})

    async def model_info(self, request: Request) -> Response:
        return JSONResponse({"model_path": "bad", "weight_version": self.version})

    async def server_info(self, request: Request) -> Response:
        return JSONResponse({"context_length": 64, "version": "0.5.23"})

    async def update_version(self, request: Request) -> Response:
        body = json.loads(await request.body())
        assert body["abort_all_requests"] is False
        self.version = body["new_version"]
        return JSONResponse({"success": True, "message": "ok"})

    async def abort(self, request: Request) -> Response:
        self.aborted.add(json.loads(await request.body())["rid"])
        return Response(status_code=200)

    async def ok(self, request: Request) -> Response:
        return JSONResponse({"success": True, "message": "ok"})

    async def update_weights(self, request: Request) -> Response:
        body = json.loads(await request.body())
        self.version = body["weight_version"]
        return JSONResponse({"success": True, "message": "ok"})
