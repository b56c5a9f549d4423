"""structlog, configured once per process: console on a terminal, JSON lines otherwise."""

from __future__ import annotations

import logging
import sys

import structlog

_configured = False


def configure_logging(level: str = "info", *, json: bool | None = None) -> None:
    """Set up structlog for this process; later calls are no-ops."""
    global _configured
    if _configured:
        return
    _configured = True
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
        logger_factory=structlog.PrintLoggerFactory(sys.stderr),
        cache_logger_on_first_use=True,
    )
