"""structlog, configured once per process: console on a terminal, JSON lines otherwise.

The level: `SEER_LOG_LEVEL` when set (`seer --log-level` sets it, so the actors a command
starts log at the same level), else the caller's default."""

from __future__ import annotations

import logging
import os
import sys

import structlog

#: the levels `--log-level` and `SEER_LOG_LEVEL` take
LEVELS = ("debug", "info", "warning", "error")
#: the environment variable every `seer` process (and the actors it starts) reads
LEVEL_ENV = "SEER_LOG_LEVEL"

_configured = False


class _Stderr:
    """The process's standard error as it is when a line is written, not when logging was
    configured: a caller that swaps `sys.stderr` (pytest's capture, a CLI test) and closes
    its stream later must not leave every later log line writing to a closed file."""

    def write(self, text: str) -> int:
        return sys.stderr.write(text)

    def flush(self) -> None:
        sys.stderr.flush()


def env_level(default: str = "info") -> str:
    """`SEER_LOG_LEVEL` (checked: `ValueError` naming it) or `default`."""
    level = os.environ.get(LEVEL_ENV, "").strip().lower()
    if not level:
        return default
    if level not in LEVELS:
        raise ValueError(f"{LEVEL_ENV}={level!r} is not one of {', '.join(LEVELS)}")
    return level


def configure_logging(
    level: str = "info", *, json: bool | None = None, force: bool = False
) -> None:
    """Set up structlog for this process at `SEER_LOG_LEVEL`, else `level`; later calls
    are no-ops unless `force`."""
    global _configured
    if _configured and not force:
        return
    _configured = True
    level = env_level(level)
    as_json = not sys.stderr.isatty() if json is None else json
    renderer: structlog.typing.Processor = (
        structlog.processors.JSONRenderer() if as_json else structlog.dev.ConsoleRenderer()
    )
    structlog.configure(
        processors=[
            structlog.contextvars.merge_contextvars,
            structlog.processors.add_log_level,
            structlog.processors.TimeStamper(fmt="iso", utc=True),
            structlog.processors.StackInfoRenderer(),
            structlog.processors.dict_tracebacks if as_json else structlog.dev.set_exc_info,
            renderer,
        ],
        wrapper_class=structlog.make_filtering_bound_logger(
            logging.getLevelNamesMapping()[level.upper()]
        ),
        logger_factory=structlog.PrintLoggerFactory(_Stderr()),  # type: ignore[arg-type]
        cache_logger_on_first_use=True,
    )
