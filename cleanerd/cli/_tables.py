"""Rich tables on stdout that stay whole when piped (operators grep and awk them), and sizes
for people.

The units rule, everywhere: JSON, log fields and metrics carry bytes and seconds; human text
shows sizes in IEC units (KiB, MiB, GiB: powers of 1024), never decimal MB.
"""

from __future__ import annotations

from collections.abc import Sequence

from rich.console import Console
from rich.filesize import pick_unit_and_suffix
from rich.table import Table

_IEC_UNITS = ["bytes", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB"]


def iec_size(size: float) -> str:
    """``1536`` -> ``1.5 KiB``; under 1 KiB, plain bytes."""
    unit, suffix = pick_unit_and_suffix(int(size), _IEC_UNITS, 1024)
    return f"{int(size)} bytes" if unit == 1 else f"{size / unit:.1f} {suffix}"


def table_console(tables: Sequence[Table]) -> Console:
    """A stdout console: the terminal's width on a tty, else wide enough that no cell folds."""
    console = Console()
    if console.is_terminal or not tables:
        return console
    wide = Console(width=10_000)
    width = max(wide.measure(table).maximum for table in tables)
    return Console(width=max(width, 80))
