"""Options shared by several commands, so they read and behave the same everywhere."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

import click

from cleanerd.format import INT_MAX, MAX_DECOMPRESSED_BYTES, limit_decompression
from cleanerd.topics import Strategy

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


def strategy_options(func: F) -> F:
    """``--strategy`` and ``--strategy-header``: the KIP-280 strategy, over the topic's."""
    for option in [
        click.option(
            "--strategy",
            type=click.Choice([s.value for s in Strategy]),
            help="Compaction strategy (KIP-280) [default: the topic's, else offset].",
        ),
        click.option("--strategy-header", help="Version header for --strategy header."),
    ][::-1]:
        func = option(func)
    return func


def cleaning_options(func: F) -> F:
    """The topic-setting overrides of a cleaning (``compact`` and ``spark compact`` alike):
    strategy, tombstone retention, minimum lag, producer expiration, and ``--roll-active``."""
    for option in [
        click.option(
            "--delete-retention-ms",
            type=click.IntRange(min=0),
            help="Tombstone retention [default: the topic's, else Kafka's 1 day]; 0 removes "
            "them all.",
        ),
        click.option(
            "--min-compaction-lag-ms",
            type=click.IntRange(min=0),
            help="Leave records younger than this [default: the topic's, else 0].",
        ),
        click.option(
            "--producer-id-expiration-ms",
            type=click.IntRange(min=1, max=INT_MAX),
            help="producer.id.expiration.ms: a producer idle this long loses its protected last "
            "batch [default: the config's, else Kafka's 1 day].",
        ),
        click.option(
            "--roll-active",
            is_flag=True,
            help="Roll each partition's active segment first, so it is compacted too (offline "
            "logs).",
        ),
    ][::-1]:
        func = option(func)
    return strategy_options(func)


def dedupe_buffer_option(default: int, help_text: str) -> Callable[[F], F]:
    """``--dedupe-buffer-bytes``: offset map memory (``log.cleaner.dedupe.buffer.size``)."""
    return click.option(
        "--dedupe-buffer-bytes",
        type=click.IntRange(min=1),
        default=default,
        show_default=True,
        help=help_text,
    )


def decompression_option(func: F) -> F:
    """``--max-decompressed-message-bytes``: the bound on each batch's decompressed records for
    a command that reads files without a topic's config (``verify``, ``dump``, ``snapshot list``
    and ``show``); set for the whole command run."""

    def enter(ctx: click.Context, _param: click.Parameter, value: int) -> int:
        ctx.with_resource(limit_decompression(value))
        return value

    return click.option(
        "--max-decompressed-message-bytes",
        "max_decompressed_message_bytes",
        type=click.IntRange(min=1, max=INT_MAX),
        default=MAX_DECOMPRESSED_BYTES,
        show_default=True,
        expose_value=False,
        callback=enter,
        help="max.decompressed.message.bytes: a batch whose records decompress past this is "
        "refused as corrupt (a decompression bomb); raise it for genuine larger batches.",
    )(func)
