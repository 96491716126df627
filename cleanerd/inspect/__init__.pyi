"""The front door of ``cleanerd.inspect``: what other packages may use (see __init__.py)."""

from ._dump import (
    DumpError as DumpError,
)
from ._dump import (
    Item as Item,
)
from ._dump import (
    JsonLines as JsonLines,
)
from ._dump import (
    dump_file as dump_file,
)
from ._dump import (
    files_to_dump as files_to_dump,
)
from ._dump import (
    index_problems as index_problems,
)
from ._dump import (
    index_sanity as index_sanity,
)
from ._files import (
    FileKind as FileKind,
)
from ._files import (
    UnknownFileKindError as UnknownFileKindError,
)
from ._files import (
    classify as classify,
)
from ._files import (
    segment_logs as segment_logs,
)
from ._text import item_line as item_line
from ._text import kafka_item_line as kafka_item_line
from ._verify import (
    looks_like_partition_dir as looks_like_partition_dir,
)
from ._verify import (
    verify_path as verify_path,
)
