"""structlog, configured once: JSON (orjson, bytes) for services, console for people."""

from __future__ import annotations

import logging
import sys

import orjson
import structlog


def configure_logging(log_format: str = "console", level: str = "warning") -> None:
    """Log to stderr; ``json`` renders one orjson line per event with contextvars merged."""
    numeric = logging.getLevelNamesMapping().get(level.upper(), logging.WARNING)
    shared: list[structlog.typing.Processor] = [
        structlog.contextvars.merge_contextvars,
        structlog.processors.add_log_level,
        structlog.processors.TimeStamper(fmt="iso", utc=True),
    ]
    if log_format == "json":
        structlog.configure(
            processors=[
                *shared,
                structlog.processors.format_exc_info,
                structlog.processors.JSONRenderer(serializer=orjson.dumps),
            ],
            wrapper_class=structlog.make_filtering_bound_logger(numeric),
            logger_factory=structlog.BytesLoggerFactory(sys.stderr.buffer),
            cache_logger_on_first_use=True,
        )
        return
    structlog.configure(
        processors=[*shared, structlog.dev.ConsoleRenderer(colors=sys.stderr.isatty())],
        wrapper_class=structlog.make_filtering_bound_logger(numeric),
        logger_factory=structlog.PrintLoggerFactory(sys.stderr),
        cache_logger_on_first_use=True,
    )
