"""structlog setup: JSON lines for machines, console rendering for humans (docs/operations.md).

The daemon logs through structlog directly (stdlib ``logging`` would be a bottleneck and adds
nothing); stdlib logging is configured only so third-party libraries (aiohttp, asyncio) write
warnings to the same stream in the same format. Context such as partition and run id is bound
with ``structlog.contextvars.bind_contextvars`` and follows asyncio tasks.
"""

from __future__ import annotations

import logging
import sys
from typing import Any, TextIO

import orjson
import structlog
from structlog.tracebacks import ExceptionDictTransformer
from structlog.typing import Processor

from cleanerd.logger import LOGGER_NAME_KEY, get_logger

__all__ = ["FORMATS", "LEVELS", "configure_logging", "get_logger"]

LEVELS = {
    "debug": logging.DEBUG,
    "info": logging.INFO,
    "warning": logging.WARNING,
    "warn": logging.WARNING,
    "error": logging.ERROR,
    "critical": logging.CRITICAL,
}
FORMATS = ("auto", "json", "console")


class _ForeignHandler(logging.StreamHandler):  # type: ignore[type-arg]
    """Marks the root handler this module installed, so reconfiguring replaces only it."""


def _fallback(value: object) -> str:
    """orjson cannot encode Paths, exceptions and the like: log their text, never fail."""
    return str(value)


def _dumps(event_dict: Any, **_: Any) -> str:
    return orjson.dumps(event_dict, default=_fallback, option=orjson.OPT_NON_STR_KEYS).decode()


def _is_tty(stream: TextIO) -> bool:
    try:
        return stream.isatty()
    except (AttributeError, ValueError):  # closed or not a real file
        return False


def configure_logging(
    fmt: str = "auto",
    level: str = "info",
    stream: TextIO | None = None,
    *,
    cache_loggers: bool = False,
) -> None:
    """Configure structlog (and stdlib logging for third-party libraries) to write to ``stream``.

    ``fmt``: auto (console on a TTY, else JSON lines), json or console. ``stream`` defaults to
    stderr. ``cache_loggers`` makes loggers freeze their configuration on first use (faster);
    leave it off where the configuration may change afterwards, as in tests.
    """
    if fmt not in FORMATS:
        raise ValueError(f"log format must be one of {', '.join(FORMATS)}, got {fmt!r}")
    if level.lower() not in LEVELS:
        raise ValueError(f"log level must be one of {', '.join(LEVELS)}, got {level!r}")
    out = stream if stream is not None else sys.stderr
    threshold = LEVELS[level.lower()]
    console = fmt == "console" or (fmt == "auto" and _is_tty(out))
    shared: list[Processor] = [
        structlog.contextvars.merge_contextvars,
        _logger_field,
        structlog.processors.add_log_level,
        structlog.processors.TimeStamper(fmt="iso", utc=True),
        structlog.processors.StackInfoRenderer(),
    ]
    renderer: Processor
    if console:
        renderer = structlog.dev.ConsoleRenderer(colors=_is_tty(out))
    else:
        # structured tracebacks without frame locals: they can hold secrets and bloat lines
        shared.append(
            structlog.processors.ExceptionRenderer(ExceptionDictTransformer(show_locals=False))
        )
        renderer = structlog.processors.JSONRenderer(serializer=_dumps)
    structlog.configure(
        processors=[*shared, renderer],
        wrapper_class=structlog.make_filtering_bound_logger(threshold),
        logger_factory=structlog.WriteLoggerFactory(file=out),
        cache_logger_on_first_use=cache_loggers,
    )
    _configure_stdlib(out, shared, renderer, max(threshold, logging.WARNING))


def _configure_stdlib(
    out: TextIO, shared: list[Processor], renderer: Processor, threshold: int
) -> None:
    """Route third-party stdlib records through the same processors, at warning and above."""
    formatter = structlog.stdlib.ProcessorFormatter(
        foreign_pre_chain=[structlog.stdlib.add_logger_name, *shared],
        processors=[structlog.stdlib.ProcessorFormatter.remove_processors_meta, renderer],
    )
    handler = _ForeignHandler(out)
    handler.setFormatter(formatter)
    handler.setLevel(threshold)
    root = logging.getLogger()
    for old in [h for h in root.handlers if isinstance(h, _ForeignHandler)]:
        root.removeHandler(old)
    root.addHandler(handler)
    root.setLevel(threshold)
    # aiohttp's access log is off in http.py; make sure a stray one never floods the stream.
    logging.getLogger("aiohttp.access").setLevel(logging.WARNING)


def _logger_field(_logger: Any, _name: str, event_dict: Any) -> Any:
    if LOGGER_NAME_KEY in event_dict:
        event_dict["logger"] = event_dict.pop(LOGGER_NAME_KEY)
    return event_dict
