"""Pointing a run's generators at an engine backend: the built-in engine or SGLang servers.

`use_backend(options, "sglang", urls=[...])` attaches generator i to `urls[i]`;
`command=` (a template with `{python}`, `{model}`, `{host}`, `{port}`, `{tp_size}`) makes
each generator launch its own server instead (SGLang's launcher by default; `seer serve`
on a CPU). The same fields map from TOML: `[generator] backend = "sglang"` and a
`[generator.sglang]` table (`actors.generator.sglang.SGLangOptions`).
"""

from __future__ import annotations

import dataclasses
import shlex
from collections.abc import Mapping, Sequence
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
