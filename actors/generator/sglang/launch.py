"""ServerProcess: an SGLang-compatible server this generator launched, and its end.

The command line is the options' template with `{python}`, `{model}`, `{host}`, `{port}`
and `{tp_size}` filled in, and the argument `{server_args}` replaced by the flags the
backend chose (`server_args`: the tokenizer, the context length). The server runs in its
own session (so stopping it reaches its children), its output goes to a log file, and it
counts as started once `/health_generate` answers 200. A server that exits or does not
become healthy within the start timeout raises `ServerLaunchError` with the tail of its log.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import aiohttp
import anyio


class ServerLaunchError(RuntimeError):
    """A launched server exited or did not become healthy in time."""


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket() as sock:
        sock.bind((host, 0))
        port: int = sock.getsockname()[1]
        return port


def _die_with_parent() -> None:
    """In the child: SIGTERM when the process that launched it dies (Linux), so a generator
    killed without its clean-up leaves no server behind."""
    with contextlib.suppress(OSError, AttributeError):
        import ctypes

        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG


SERVER_ARGS = "{server_args}"


def server_args(
    model: str, *, skip_tokenizer_init: bool, context_len: int = 0, has_tokenizer: bool = True
) -> list[str]:
    """SGLang's flags for a server of the folder `model`: `--skip-tokenizer-init` (token ids
    in and out; no tokenizer files needed) or `--tokenizer-path model` (`ServerLaunchError`
    when the folder has no tokenizer), and `--context-length N` only when N > 0."""
    if skip_tokenizer_init:
        args = ["--skip-tokenizer-init"]
    elif not has_tokenizer:
        raise ServerLaunchError(
            f"{model}: no tokenizer files (tokenizer.json, tokenizer_config.json) for the "
            f"server; add them to the model folder or set SGLangOptions.skip_tokenizer_init"
        )
    else:
        args = ["--tokenizer-path", model]
    if context_len > 0:
        args += ["--context-length", str(context_len)]
    return args


def fill_command(
    template: tuple[str, ...],
    *,
    model: str,
    host: str,
    port: int,
    tp_size: int = 1,
    extra: list[str] | tuple[str, ...] = (),
) -> list[str]:
    """`template` filled in; the argument `{server_args}` becomes `extra` (zero or more)."""
    values = {
        "python": sys.executable, "model": model, "host": host, "port": str(port),
        "tp_size": str(tp_size),
    }  # fmt: skip
    out: list[str] = []
    for arg in template:
        if arg == SERVER_ARGS:
            out.extend(extra)
        else:
            out.append(arg.format(**values))
    return out


class ServerProcess:
    def __init__(
        self, args: list[str], url: str, log_path: Path, *, health_path: str = "/health_generate"
    ) -> None:
        self.args = args
        self.url = url
        self.log_path = log_path
        self.health_path = health_path  # 200 here = started
        self.proc: subprocess.Popen[bytes] | None = None

    async def start(self, timeout_s: float) -> None:
        self.spawn()
        await self.wait_healthy(timeout_s)

    def spawn(self) -> None:
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        with self.log_path.open("ab") as log:
            self.proc = subprocess.Popen(
                self.args,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
                preexec_fn=_die_with_parent,
            )

    async def wait_healthy(self, timeout_s: float) -> None:
        """Until the health path answers 200; `ServerLaunchError` when the server exits
        or the time is up (then it is stopped)."""
        assert self.proc is not None, "spawn() first"
        deadline = time.monotonic() + timeout_s
        timeout = aiohttp.ClientTimeout(total=5.0)
        async with aiohttp.ClientSession(base_url=self.url, timeout=timeout) as http:
            while True:
                if self.proc.poll() is not None:
                    raise ServerLaunchError(
                        f"server exited with {self.proc.returncode}: {self.args}\n{self.log_tail()}"
                    )
                if await _answers_ok(http, self.health_path):
                    return
                if time.monotonic() > deadline:
                    self.stop()
                    raise ServerLaunchError(
                        f"server not healthy after {timeout_s} s: {self.args}\n{self.log_tail()}"
                    )
                await anyio.sleep(0.2)

    def log_tail(self, num_bytes: int = 2000) -> str:
        try:
            return self.log_path.read_bytes()[-num_bytes:].decode("utf-8", "replace")
        except OSError:
            return ""

    def stop(self, timeout_s: float = 10.0) -> None:
        """SIGTERM to the server's process group, SIGKILL if it lingers."""
        proc, self.proc = self.proc, None
        if proc is None or proc.poll() is not None:
            return
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout_s)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout_s)


async def _answers_ok(http: aiohttp.ClientSession, path: str) -> bool:
    """Whether `GET path` answers 200; False when it answers otherwise, refuses the
    connection or times out (the server is still starting)."""
    try:
        async with http.get(path) as reply:
            return reply.status == 200
    except (aiohttp.ClientError, TimeoutError, OSError):
        return False
