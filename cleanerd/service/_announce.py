"""What the daemon says about itself: the systemd STATUS line and the start-up log lines."""

from __future__ import annotations

from collections.abc import Collection

from cleanerd.config import CleanerdConfig, http_warnings, join_listen
from cleanerd.scheduling import CleaningState, PartitionStatus
from cleanerd.service._logging import get_logger

log = get_logger("cleanerd.daemon")


def status_line(statuses: Collection[PartitionStatus]) -> str:
    """``12 partitions, 3 to clean, 1 uncleanable; cleaning orders-0`` (``systemctl status``)."""
    busy = [str(s.tp) for s in statuses if s.state is CleaningState.IN_PROGRESS]
    uncleanable = sum(1 for s in statuses if s.uncleanable)
    text = (
        f"{len(statuses)} partitions, {sum(1 for s in statuses if s.cleanable)} to clean, "
        f"{uncleanable} uncleanable"
    )
    return text + (f"; cleaning {', '.join(busy[:3])}" if busy else "")


def log_listening(config: CleanerdConfig) -> None:
    """Warn when the HTTP port is reachable from the network without an admin token, or when
    its token crosses the network in clear."""
    for warning in http_warnings(config):
        log.warning(warning)


def log_ready(
    config: CleanerdConfig, statuses: Collection[PartitionStatus], http_port: int | None
) -> None:
    """The ``cleanerd ready`` line, and a warning when nothing will ever be compacted."""
    log.info(
        "cleanerd ready",
        log_dirs=[str(p) for p in config.log_dirs],
        partitions=len(statuses),
        compacted=sum(1 for s in statuses if s.compacted),
        workers=config.threads,
        http=f"{'https' if config.tls_cert_file else 'http'}://"
        f"{join_listen(config.http_host, http_port)}"
        if http_port is not None and config.http_host is not None
        else None,
    )
    if statuses and not any(s.compacted for s in statuses):
        log.warning(
            "no partition has cleanup.policy=compact: nothing will be compacted "
            "(set log.cleanup.policy or a [topics] table)"
        )
