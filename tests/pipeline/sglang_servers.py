"""`seer serve` servers for the SGLang backend's tests: real processes on free ports.

Each server runs `tests.pipeline.schema_serve` (`seer serve` with SGLang 0.5.23's own
schema judging every `/generate` request and response, as SGLang's contract gate does), so
every request the backend sends in these tests is validated by SGLang's `GenerateRequest`.
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
from collections.abc import AsyncIterator, Sequence
from pathlib import Path

from actors.generator.sglang.launch import ServerProcess, free_port

SERVE_COMMAND = (
    "{python}", "-m", "tests.pipeline.schema_serve", "--model", "{model}",
    "--host", "{host}", "--port", "{port}", "--max-batch", "8",
)  # fmt: skip


def serve_args(model: str, port: int, *extra: str) -> list[str]:
    values = {"python": sys.executable, "model": model, "host": "127.0.0.1", "port": str(port)}
    return [a.format(**values) for a in SERVE_COMMAND] + list(extra)


@contextlib.asynccontextmanager
async def seer_servers(
    model: str, count: int, log_dir: Path, extra: Sequence[str] = ()
) -> AsyncIterator[list[ServerProcess]]:
    servers = []
    try:
        for i in range(count):
            port = free_port()
            server = ServerProcess(
                serve_args(model, port, *extra), f"http://127.0.0.1:{port}", log_dir / f"s{i}.log"
            )
            servers.append(server)
            server.spawn()
        for server in servers:  # they start side by side
            await server.wait_healthy(timeout_s=120.0)
        yield servers
    finally:
        for server in servers:
            server.stop()


def kill(server: ServerProcess) -> None:
    """SIGKILL, no goodbye (a crashed server)."""
    assert server.proc is not None
    os.killpg(server.proc.pid, signal.SIGKILL)
    server.proc.wait(10)
