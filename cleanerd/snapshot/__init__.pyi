"""The front door of ``cleanerd.snapshot``: what other packages may use (see __init__.py)."""

from ._build import (
    DEFAULT_BUDGET as DEFAULT_BUDGET,
)
from ._build import (
    SnapshotResult as SnapshotResult,
)
from ._build import (
    create_snapshot as create_snapshot,
)
from ._build import (
    load_state as load_state,
)
from ._format import (
    SnapshotError as SnapshotError,
)
from ._format import (
    SnapshotReader as SnapshotReader,
)
from ._format import (
    codec_for as codec_for,
)
from ._retention import (
    TruncateResult as TruncateResult,
)
from ._retention import (
    apply_retention as apply_retention,
)
from ._retention import (
    truncate_log as truncate_log,
)
