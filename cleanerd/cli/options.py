"""Options shared by several commands, so they read and behave the same everywhere."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

import click

F = TypeVar("F", bound=Callable[..., Any])


def format_option(help_text: str, dest: str = "fmt") -> Callable[[F], F]:
    """``--format text|json`` (default text); ``help_text`` says what each format prints."""
    return click.option(
        "--format",
        dest,
        type=click.Choice(["text", "json"]),
        default="text",
        show_default=True,
        help=help_text,
    )
