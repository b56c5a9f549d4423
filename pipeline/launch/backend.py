"""Pointing a run's generators at an engine backend: the built-in engine or SGLang servers.

`use_backend(options, "sglang", urls=[...])` attaches generator i to `urls[i]`;
`command=` (a template with `{python}`, `{model}`, `{host}`, `{port}`, `{tp_size}`) makes
each generator launch its own server instead (SGLang's launcher by default; `seer serve`
on a CPU). The same fields map from TOML: `[generator] backend = "sglang"` and a
`[generator.sglang]` table (`actors.generator.sglang.SGLangOptions`). `routed(options, log)`
starts SGLang's router in front of the attached servers for as long as it lasts (`seer run
--sglang-router`); TOML can name a router that already runs: `router_url = "..."`.
"""

from __future__ import annotations

import contextlib
import dataclasses
import shlex
from collections.abc import AsyncIterator, Mapping, Sequence
from pathlib import Path
from typing import Any

from actors.generator import GeneratorOptions
from actors.generator.sglang import SGLangOptions

SEER_SERVE_COMMAND = (
    "{python}", "-m", "pipeline.cli", "serve", "--model", "{model}",
    "--host", "{host}", "--port", "{port}", "--tp-size", "{tp_size}",
)  # fmt: skip


def use_backend(
    options: GeneratorOptions,
    backend: str | None = None,
    *,
    urls: Sequence[str] = (),
    command: str | Sequence[str] | None = None,
) -> GeneratorOptions:
    """`options` with the backend and, for SGLang, where its servers are."""
    sglang = options.sglang
    if urls:
        sglang = dataclasses.replace(sglang, urls=tuple(urls))
    if command:
        args = tuple(shlex.split(command)) if isinstance(command, str) else tuple(command)
        sglang = dataclasses.replace(sglang, command=args)
    chosen = backend or ("sglang" if urls or command else options.backend)
    return dataclasses.replace(options, backend=chosen, sglang=sglang)


def server_start_s(generator: Mapping[str, Any]) -> float:
    """How long the launcher should wait for generators that launch their own SGLang
    server (its start timeout plus a minute), or 0 when they do not."""
    if generator.get("backend") != "sglang":
        return 0.0
    sglang = generator.get("sglang", {})
    if isinstance(sglang, SGLangOptions):
        sglang = dataclasses.asdict(sglang)
    if sglang.get("urls"):
        return 0.0
    return float(sglang.get("start_timeout_s", SGLangOptions.start_timeout_s)) + 60.0


@contextlib.asynccontextmanager
async def routed(options: GeneratorOptions, log_path: Path) -> AsyncIterator[GeneratorOptions]:
    """`options` with SGLang's router launched in front of its servers (`sglang.urls`, which
    it needs): `/generate` goes through it, pinned to each generator's own server."""
    from actors.extras import require

    require("sglang_router", extra="router", feature="SGLang's router")
    require("aiohttp", extra="router", feature="SGLang's router")
    from actors.generator.sglang.router import running_router

    if options.backend != "sglang" or not options.sglang.urls:
        raise ValueError("SGLang's router needs the sglang backend attached to servers by URL")
    async with running_router(options.sglang.urls, log_path) as url:
        sglang = dataclasses.replace(options.sglang, router_url=url)
        yield dataclasses.replace(options, sglang=sglang)
