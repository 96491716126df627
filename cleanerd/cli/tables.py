"""Rich tables on stdout that stay whole when piped (operators grep and awk them)."""

from __future__ import annotations

from collections.abc import Sequence

from rich.console import Console
from rich.table import Table


def table_console(tables: Sequence[Table]) -> Console:
    """A stdout console: the terminal's width on a tty, else wide enough that no cell folds."""
    console = Console()
    if console.is_terminal or not tables:
        return console
    wide = Console(width=10_000)
    width = max(wide.measure(table).maximum for table in tables)
    return Console(width=max(width, 80))
