"""structlog configuration: JSON lines with bound context, console rendering, level filtering."""

from __future__ import annotations

import io
import json
import logging
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
import structlog

from cleanerd.service._logging import configure_logging, get_logger


@pytest.fixture(autouse=True)
def _restore_logging() -> Iterator[None]:
    """configure_logging changes process-wide state; put it back for the other tests."""
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    yield
    structlog.contextvars.clear_contextvars()
    structlog.reset_defaults()
    for handler in list(root.handlers):
        if handler not in handlers:
            root.removeHandler(handler)
    root.setLevel(level)


class TtyStream(io.StringIO):
    def isatty(self) -> bool:
        return True


def _lines(stream: io.StringIO) -> list[dict[str, Any]]:
    return [json.loads(line) for line in stream.getvalue().splitlines()]


def test_json_lines_carry_bound_context() -> None:
    out = io.StringIO()
    configure_logging("json", "info", out)
    structlog.contextvars.bind_contextvars(topic="orders", partition=3, run_id="r-17")
    get_logger("cleanerd.worker").info("cleaned", bytes_read=1024, log_dir=Path("/data"))
    structlog.contextvars.clear_contextvars()
    get_logger().info("idle")
    first, second = _lines(out)
    assert first["event"] == "cleaned"
    assert first["level"] == "info"
    assert first["logger"] == "cleanerd.worker"
    assert (first["topic"], first["partition"], first["run_id"]) == ("orders", 3, "r-17")
    assert first["bytes_read"] == 1024
    assert first["log_dir"] == "/data"  # not JSON-native: logged as text, never an error
    stamp = datetime.fromisoformat(first["timestamp"])
    assert stamp.utcoffset() == UTC.utcoffset(None)
    assert "topic" not in second


def test_json_exceptions_are_structured_without_locals() -> None:
    out = io.StringIO()
    configure_logging("json", "info", out)
    secret = "hunter2"
    try:
        raise ValueError(f"bad {len(secret)}")
    except ValueError:
        get_logger().exception("clean failed")
    (line,) = _lines(out)
    assert line["level"] == "error"
    (exc,) = line["exception"]
    assert exc["exc_type"] == "ValueError"
    assert exc["exc_value"] == "bad 7"
    assert "hunter2" not in out.getvalue()


def test_auto_picks_json_off_a_tty_and_console_on_one() -> None:
    plain = io.StringIO()
    configure_logging("auto", "info", plain)
    get_logger().info("hello", n=1)
    assert json.loads(plain.getvalue())["event"] == "hello"

    tty = TtyStream()
    configure_logging("auto", "info", tty)
    get_logger().info("hello", n=1)
    text = tty.getvalue()
    assert "hello" in text
    assert "\x1b[" in text  # colours on a terminal
    with pytest.raises(json.JSONDecodeError):
        json.loads(text)


def test_console_format_forced() -> None:
    out = io.StringIO()
    configure_logging("console", "info", out)
    structlog.contextvars.bind_contextvars(topic="orders")
    get_logger().warning("slow clean", seconds=12.5)
    text = out.getvalue()
    assert "warning" in text
    assert "slow clean" in text
    assert "seconds=12.5" in text
    assert "topic=orders" in text
    assert "\x1b[" not in text  # no colours when the stream is not a terminal


@pytest.mark.parametrize(
    ("level", "seen"),
    [
        ("debug", ["d", "i", "w", "e"]),
        ("info", ["i", "w", "e"]),
        ("WARNING", ["w", "e"]),
        ("error", ["e"]),
    ],
)
def test_level_filtering(level: str, seen: list[str]) -> None:
    out = io.StringIO()
    configure_logging("json", level, out)
    log = get_logger()
    log.debug("d")
    log.info("i")
    log.warning("w")
    log.error("e")
    assert [line["event"] for line in _lines(out)] == seen


def test_third_party_stdlib_logs_share_the_stream_at_warning() -> None:
    out = io.StringIO()
    configure_logging("json", "debug", out)
    lib = logging.getLogger("aiohttp.server")
    lib.info("chatty %s", "detail")
    lib.warning("connection lost to %s", "10.0.0.1")
    (line,) = _lines(out)
    assert line["event"] == "connection lost to 10.0.0.1"
    assert line["level"] == "warning"
    assert line["logger"] == "aiohttp.server"
    assert "timestamp" in line


def test_reconfiguring_moves_existing_loggers() -> None:
    first, second = io.StringIO(), io.StringIO()
    configure_logging("json", "info", first)
    log = get_logger()
    log.info("one")
    configure_logging("json", "info", second)
    log.info("two")
    logging.getLogger("lib").warning("three")
    assert [line["event"] for line in _lines(first)] == ["one"]
    assert [line["event"] for line in _lines(second)] == ["two", "three"]
    ours = [
        h
        for h in logging.getLogger().handlers
        if isinstance(h, logging.StreamHandler) and getattr(h, "stream", None) in (first, second)
    ]
    assert len(ours) == 1  # the old handler was replaced, not stacked


@pytest.mark.parametrize(("fmt", "level"), [("xml", "info"), ("json", "loud")])
def test_bad_format_or_level(fmt: str, level: str) -> None:
    with pytest.raises(ValueError, match="must be one of"):
        configure_logging(fmt, level, io.StringIO())
