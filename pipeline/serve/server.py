"""Start ``seer serve``: load the model, start the engine thread, run uvicorn.

``start_server(model_path, host, port)`` runs the server in this process (uvicorn on a
background thread, its own event loop) and returns a ``ServerHandle`` with ``.url`` and
``.stop()``; ``serve(...)`` runs it in the foreground (the ``seer serve`` command). Port 0
picks a free port; the handle (and the command's first line) says which.

The model: ``model_path`` is a safetensors file saved by ``save_model`` (a warm start, a
checkpoint's ``model.safetensors``), a Hugging Face Llama/Qwen2 folder (``config.json`` +
``*.safetensors``) or a trainer checkpoint folder (its ``hf/`` is served). Without one, the
caller's ``DefaultModel``: its warm start when that file exists, otherwise a fresh random
initialisation of its shape, which generates noise (``seer serve`` gives the default task's
model as ``seer run`` builds it; the CLI resolves it, this module knows no RL recipe).
"""

from __future__ import annotations

import dataclasses
import json
import os
import socket
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import structlog
import uvicorn

from actors.generator.builtin import EngineConfig, TorchEngine
from actors.model import LlamaModel, ModelConfig, load_pretrained, read_folder
from pipeline.serve.app import ServerInfo, build_app
from pipeline.serve.auth import ApiKeyAuth
from pipeline.serve.bridge import EngineBridge
from pipeline.serve.paths import weights_path

log = structlog.get_logger()


def health_check_timeout_from_env() -> float:
    """SGLang reads its health-check timeout from SGLANG_HEALTH_CHECK_TIMEOUT (20 s)."""
    raw = os.environ.get("SGLANG_HEALTH_CHECK_TIMEOUT", "20")
    try:
        value = float(raw)
    except ValueError:
        raise ValueError(f"SGLANG_HEALTH_CHECK_TIMEOUT must be a number, got {raw!r}") from None
    if not value > 0:
        raise ValueError(f"SGLANG_HEALTH_CHECK_TIMEOUT must be > 0, got {raw!r}")
    return value


@dataclass(frozen=True, kw_only=True)
class DefaultModel:
    """What serves when no model path is given, and the end-of-sequence token of a model
    that names none: ``warm_start`` (a ``save_model`` file) when it exists, else a random
    model of shape ``config`` (``seed``); ``eos_token_id`` for a model of
    ``config.vocab_size`` tokens."""

    config: ModelConfig
    warm_start: str = ""
    seed: int = 0
    eos_token_id: int | None = None


@dataclass(frozen=True, kw_only=True)
class ServeOptions:
    """``max_batch`` .. ``max_prefill_tokens``: the engine's (``EngineConfig``);
    ``eos_token_id`` None = the HF config's, else the default model's when the vocabularies
    match; ``default_model``: what serves without ``model_path`` (None: a path is needed);
    ``num_threads`` torch threads (``--tp-size``: intra-op threads split each matmul the way
    tensor parallelism splits it across GPUs; ``/server_info`` reports it as ``tp_size``);
    ``step_delay_s`` a pause after every engine step (a latency knob, like SGLang's mock
    worker's, for tests and fault drills)."""

    model_path: str = ""
    host: str = "127.0.0.1"
    port: int = 30000
    max_batch: int = 64
    kv_budget_tokens: int = 65536
    max_prefill_tokens: int = 1024
    num_threads: int = 1
    eos_token_id: int | None = None
    default_model: DefaultModel | None = None
    log_level: str = "warning"
    step_delay_s: float = 0.0  # sleep after every engine step: slows the server on purpose
    api_key: str = ""  # "" = open; else SGLang's --api-key (Authorization: Bearer <key>)
    # SGLang's --admin-api-key: the control routes then take only this key (auth.py)
    admin_api_key: str = ""
    # SGLang's --context-length: caps the model's context (None: the model's)
    context_length: int | None = None
    incremental_streaming_output: bool = False  # stream frames carry only new tokens
    # /health_generate's wait for engine output (SGLang: SGLANG_HEALTH_CHECK_TIMEOUT, 20 s)
    health_check_timeout_s: float = field(default_factory=health_check_timeout_from_env)


@dataclass
class ServerHandle:
    url: str
    host: str
    port: int
    bridge: EngineBridge
    _server: uvicorn.Server
    _thread: threading.Thread

    def stop(self, timeout_s: float = 30.0) -> None:
        self._server.should_exit = True
        self._thread.join(timeout_s)
        self.bridge.stop()

    def __enter__(self) -> ServerHandle:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def start_server(
    model_path: str | None = None,
    host: str = "127.0.0.1",
    port: int = 0,
    options: ServeOptions | None = None,
    *,
    ready_timeout_s: float = 60.0,
) -> ServerHandle:
    """``seer serve`` in this process; returns once it accepts connections."""
    opts = dataclasses.replace(
        options or ServeOptions(), model_path=model_path or "", host=host, port=port
    )
    sock = _bind(opts.host, opts.port)
    bridge, info = _build(opts, sock.getsockname()[1])
    server = uvicorn.Server(_uvicorn_config(bridge, info, opts))
    thread = threading.Thread(
        target=server.run, kwargs={"sockets": [sock]}, name="seer-serve-http", daemon=True
    )
    thread.start()
    deadline = time.monotonic() + ready_timeout_s
    while not server.started and thread.is_alive() and time.monotonic() < deadline:
        time.sleep(0.01)
    if not server.started:
        server.should_exit = True
        bridge.stop()
        raise RuntimeError(f"seer serve did not start on {opts.host}:{info.port}")
    url = f"http://{_url_host(opts.host)}:{info.port}"
    return ServerHandle(url, opts.host, info.port, bridge, server, thread)


def serve(options: ServeOptions) -> None:
    """Run in the foreground until interrupted; prints the URL first."""
    sock = _bind(options.host, options.port)
    bridge, info = _build(options, sock.getsockname()[1])
    print(
        f"seer serve: listening on http://{_url_host(options.host)}:{info.port} "
        f"(model {info.model_path or 'default'})",
        flush=True,
    )
    try:
        uvicorn.Server(_uvicorn_config(bridge, info, options)).run(sockets=[sock])
    finally:
        bridge.stop()


def load_serving_model(options: ServeOptions) -> tuple[LlamaModel, int | None, str]:
    """(model, eos token id, a description of where it came from)."""
    path = str(weights_path(options.model_path)) if options.model_path else ""
    eos = options.eos_token_id
    if path:  # a Hugging Face folder or a seer safetensors file: the one loader
        model = load_pretrained(path)
        if eos is None and Path(path).is_dir():
            eos = read_folder(path).eos_token_id
    else:
        model, path = _default_model(options.default_model)
    default = options.default_model
    if eos is None and default is not None and default.config.vocab_size == model.config.vocab_size:
        eos = default.eos_token_id
    return model, eos, path


def _default_model(default: DefaultModel | None) -> tuple[LlamaModel, str]:
    if default is None:
        raise ValueError("seer serve needs a model path (or ServeOptions.default_model)")
    if default.warm_start and Path(default.warm_start).exists():
        return load_pretrained(default.warm_start), default.warm_start
    log.warning("serve_random_model", reason="no cached warm start", looked_for=default.warm_start)
    return LlamaModel.random(default.config, seed=default.seed), ""


def _build(options: ServeOptions, port: int) -> tuple[EngineBridge, ServerInfo]:
    model, eos, source = load_serving_model(options)
    config = EngineConfig(
        max_batch=options.max_batch,
        kv_budget_tokens=options.kv_budget_tokens,
        max_prefill_tokens=options.max_prefill_tokens,
        num_threads=options.num_threads,
        eos_token_id=eos,
        profile=False,
    )
    engine = TorchEngine(model, config)
    context_len = engine.max_seq_len
    if options.context_length is not None:
        if not 1 < options.context_length <= engine.max_seq_len:
            raise ValueError(
                f"context_length {options.context_length} must be in 2..{engine.max_seq_len} "
                f"(the model's context)"
            )
        context_len = options.context_length
    bridge = EngineBridge(engine, step_delay_s=options.step_delay_s)
    bridge.start()
    info = ServerInfo(
        model_path=source,
        host=options.host,
        port=port,
        context_len=context_len,
        context_length=options.context_length,
        vocab_size=model.config.vocab_size,
        max_batch=config.max_batch,
        kv_budget_tokens=config.kv_budget_tokens,
        max_prefill_tokens=config.max_prefill_tokens,
        eos_token_id=eos,
        kv_bytes_per_token=model.config.kv_bytes_per_token,
        weight_bytes=sum(p.numel() * p.element_size() for p in model.parameters()),
        incremental_streaming_output=options.incremental_streaming_output,
        tp_size=options.num_threads,
        health_check_timeout_s=options.health_check_timeout_s,
    )
    log.info("serve_started", **json.loads(json.dumps(dataclasses.asdict(info))))
    return bridge, info


def _uvicorn_config(bridge: EngineBridge, info: ServerInfo, opts: ServeOptions) -> uvicorn.Config:
    app: Any = build_app(bridge, info)
    if opts.api_key or opts.admin_api_key:
        app = ApiKeyAuth(app, opts.api_key, opts.admin_api_key)
    return uvicorn.Config(
        app,
        log_level=opts.log_level,
        access_log=False,
        lifespan="off",
        timeout_graceful_shutdown=5,
    )


def _bind(host: str, port: int) -> socket.socket:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    # proto IPPROTO_TCP, not 0: asyncio sets TCP_NODELAY only on sockets that say they are
    # TCP, and without it Nagle's algorithm met the client's delayed ACK on every reused
    # keep-alive connection: about 40 ms added to each request (/model_info 44 ms, now ~1)
    sock = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((host, port))
    sock.listen(2048)
    sock.set_inheritable(True)
    return sock


def _url_host(host: str) -> str:
    return f"[{host}]" if ":" in host else host
