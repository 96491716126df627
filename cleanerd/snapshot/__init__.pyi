"""The front door of ``cleanerd.snapshot``: what other packages may use (see __init__.py)."""

from ._build import (
    DEFAULT_BUDGET as DEFAULT_BUDGET,
    SnapshotResult as SnapshotResult,
    create_snapshot as create_snapshot,
    load_state as load_state,
)
from ._format import (
    SnapshotError as SnapshotError,
    SnapshotReader as SnapshotReader,
    codec_for as codec_for,
)
from ._retention import (
    TruncateResult as TruncateResult,
    apply_retention as apply_retention,
    truncate_log as truncate_log,
)
