"""Named structlog loggers for every layer; only the daemon decides where they write.

Below service/ so the synchronous scheduler can log without importing the asyncio package;
``service/_logging.py`` configures the output and turns ``LOGGER_NAME_KEY`` into ``logger``.
"""

from __future__ import annotations

from typing import Any, cast

import structlog
from structlog.typing import FilteringBoundLogger

LOGGER_NAME_KEY = "logger_name"
"""structlog.get_logger takes ``logger`` itself, so the name travels under this key."""


def get_logger(name: str | None = None, **initial: Any) -> FilteringBoundLogger:
    """A structlog logger, optionally tagged with ``logger=name`` and initial values."""
    # Stay a lazy proxy (no bind here): module-level loggers are made at import, before
    # the daemon configures logging, and must pick up its configuration.
    if name is not None:
        initial[LOGGER_NAME_KEY] = name
    return cast(FilteringBoundLogger, structlog.get_logger(**initial))
