"""Pointing a run's generators at an engine backend: the built-in engine or SGLang servers.

`use_backend(options, "sglang", urls=[...])` attaches generator i to `urls[i]`;
`command=` (a template with `{python}`, `{model}`, `{host}`, `{port}`) makes each generator
launch its own server instead (SGLang's launcher by default; `seer serve` on a CPU). The
same fields map from TOML: `[generator] backend = "sglang"` and a `[generator.sglang]`
table (`actors.generator.sglang.SGLangOptions`).
"""

from __future__ import annotations

import dataclasses
import shlex
from collections.abc import Sequence

from actors.generator import GeneratorOptions

SEER_SERVE_COMMAND = (
    "{python}", "-m", "pipeline.cli", "serve", "--model", "{model}",
    "--host", "{host}", "--port", "{port}",
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
