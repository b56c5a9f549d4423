"""SGLang's router (`sglang-router` 0.3.2, the Rust sgl-model-gateway) in front of the
servers for `/generate`, with placement kept ours.

What goes through it: only `/generate`. Abort, health, loads, pause/continue, weight
updates and `/model_info` go to each server directly (the backend's `SGLangClient`).

How a chunk is pinned to the server our scheduler chose (read in the gateway's source at
0.3.2 and checked against the installed binary): the `consistent_hashing` policy sends a
request carrying `X-SMG-Target-Worker: <i>` to worker `i` of the router's own list and
answers 503 `no_available_workers` when that worker is unknown or unhealthy; it never moves
the request to another worker. `i` indexes the list in the order `GET /workers` shows it,
which is the iteration order of the router's registry (a hash map keyed by random worker
ids), not the order the workers were given in: so each engine looks its index up in the
listing once it starts (`worker_index`), and the list must not change during a run. The
`manual` policy (the only header policy the 0.3.2 CLI offers) ignores the target header
and pins routing keys to workers it picks itself, so `python -m
actors.generator.sglang.router` starts the router through `sglang_router`'s Python API with
`consistent_hashing`, retries and the circuit breaker off (a failing server reaches the
backend's lost-server path at once), and no worker; `register_workers` adds them. The
router answers for a worker that does not: a dead one is a 500 `call_upstream_*`, an
unhealthy one a 503 `no_available_workers`; the client maps both (`is_upstream_failure`) to
a lost server, as a refused connection would be without the router.

The router asks each worker for `/health` (every `health_check_interval_secs`),
`/server_info` and `/model_info` (at registration); `seer serve` answers all three. It
re-encodes the `/generate` body from its own request type: the keys the backend sends
survive except `spaces_between_special_tokens` (text only), and it adds defaults that
SGLang 0.5.23's schema accepts (`log_metrics`, `return_text_in_logprobs`, ...).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import sys
import time
from collections.abc import AsyncIterator, Sequence
from pathlib import Path
from typing import Any

import aiohttp
import anyio

from actors.generator.errors import ServerError
from actors.generator.sglang.launch import ServerProcess, free_port

TARGET_HEADER = "X-SMG-Target-Worker"
POLICY = "consistent_hashing"
# the router's own error codes for "the worker did not answer" (a dead worker is a 500
# `call_upstream_request_error`, an unhealthy or unknown target a 503
# `no_available_workers`): the server is lost, as if it had been called directly
LOST_CODES = frozenset({"no_available_workers", "timeout"})


class RouterError(ServerError):
    """The router does not (or no longer) route to a server as asked."""


def normalize_url(url: str) -> str:
    return url.rstrip("/")


def worker_index(listing: Any, url: str) -> int:
    """`url`'s index in the router's `GET /workers` listing: the `X-SMG-Target-Worker`
    value that reaches it."""
    workers = listing.get("workers") if isinstance(listing, dict) else None
    if not isinstance(workers, list):
        raise RouterError(f"GET /workers: expected {{'workers': [...]}}, got {listing!r:.200}")
    urls = [normalize_url(str(w.get("url", ""))) for w in workers if isinstance(w, dict)]
    if len(urls) != len(workers):
        raise RouterError(f"GET /workers: malformed entries in {workers!r:.200}")
    if normalize_url(url) not in urls:
        raise RouterError(f"the router does not list {url} (it lists {urls})")
    return urls.index(normalize_url(url))


def is_upstream_failure(status: int, body: bytes) -> bool:
    """Whether the router's error response says the worker itself failed to answer."""
    if status < 500:
        return False
    try:
        data = json.loads(body)
    except ValueError:
        return False
    err = data.get("error") if isinstance(data, dict) else None
    code = err.get("code") if isinstance(err, dict) else None
    return isinstance(code, str) and (code.startswith("call_upstream_") or code in LOST_CODES)


def is_registered(listing: Any, url: str) -> bool:
    """Whether the router lists `url` as a healthy worker."""
    workers = listing.get("workers") if isinstance(listing, dict) else None
    return any(
        isinstance(w, dict)
        and normalize_url(str(w.get("url", ""))) == normalize_url(url)
        and w.get("is_healthy") is True
        for w in workers or ()
    )


async def register_workers(router_url: str, urls: Sequence[str], timeout_s: float) -> None:
    """Add each server to the router (`POST /workers`) and wait until it lists all of them
    as healthy; `RouterError` when it refuses one or the time is up."""
    deadline = time.monotonic() + timeout_s
    timeout = aiohttp.ClientTimeout(total=10.0)
    async with aiohttp.ClientSession(base_url=router_url, timeout=timeout) as http:
        listing = await _get_json(http, "/workers")
        for url in urls:
            if is_registered(listing, url):
                continue
            async with http.post("/workers", json={"url": normalize_url(url)}) as reply:
                if reply.status >= 300:
                    text = await reply.text()
                    raise RouterError(f"POST /workers {url}: {reply.status} {text:.300}")
        while not all(is_registered(listing, url) for url in urls):
            if time.monotonic() > deadline:
                raise RouterError(f"router lists {listing!r:.300}, not every one of {urls}")
            await anyio.sleep(0.1)
            listing = await _get_json(http, "/workers")


async def _get_json(http: aiohttp.ClientSession, path: str) -> Any:
    async with http.get(path) as reply:
        return await reply.json(content_type=None)


def router_command(host: str, port: int, prometheus_port: int) -> list[str]:
    return [
        sys.executable, "-m", "actors.generator.sglang.router",
        "--host", host, "--port", str(port), "--prometheus-port", str(prometheus_port),
    ]  # fmt: skip


@contextlib.asynccontextmanager
async def running_router(
    urls: Sequence[str],
    log_path: Path,
    *,
    host: str = "127.0.0.1",
    start_timeout_s: float = 60.0,
) -> AsyncIterator[str]:
    """A router on a free port in front of `urls` (registered in that order, each listed
    healthy before this yields its URL); stopped on exit."""
    port = free_port(host)
    url = f"http://{host}:{port}"
    process = ServerProcess(
        router_command(host, port, free_port(host)), url, log_path, health_path="/liveness"
    )
    try:
        await process.start(start_timeout_s)
        await register_workers(url, urls, start_timeout_s)
        yield url
    finally:
        process.stop()


def main(argv: Sequence[str] | None = None) -> None:
    """`python -m actors.generator.sglang.router`: the router with the `consistent_hashing`
    policy and no worker (add them with `POST /workers`)."""
    parser = argparse.ArgumentParser(description=main.__doc__)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=30000)
    parser.add_argument("--prometheus-port", type=int, default=29000)
    parser.add_argument("--log-level", default="warn", choices=("debug", "info", "warn", "error"))
    parser.add_argument("--request-timeout-secs", type=int, default=1800)
    args = parser.parse_args(argv)
    try:
        from sglang_router.router import Router
        from sglang_router.router_args import RouterArgs
    except ImportError:
        sys.exit("the SGLang router is not installed: pip install 'seer-rl[router]'")
    router_args = RouterArgs(
        worker_urls=[],
        policy=POLICY,
        host=args.host,
        port=args.port,
        prometheus_host=args.host,
        prometheus_port=args.prometheus_port,
        log_level=args.log_level,
        request_timeout_secs=args.request_timeout_secs,
        disable_retries=True,
        disable_circuit_breaker=True,
    )
    Router.from_args(router_args).start()


if __name__ == "__main__":
    main()
