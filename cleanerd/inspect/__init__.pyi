"""The front door of ``cleanerd.inspect``: what other packages may use (see __init__.py)."""

from ._dump import (
    DumpError as DumpError,
    Item as Item,
    JsonLines as JsonLines,
    dump_file as dump_file,
    files_to_dump as files_to_dump,
    index_problems as index_problems,
    index_sanity as index_sanity,
)
from ._erasure import (
    Copy as Copy,
    ErasureReport as ErasureReport,
    ErasureTarget as ErasureTarget,
    KeyInPartition as KeyInPartition,
    KeyReport as KeyReport,
    check_erasure as check_erasure,
    erasure_partitions as erasure_partitions,
    key_text as key_text,
    parse_key as parse_key,
    read_key_file as read_key_file,
)
from ._files import (
    FileKind as FileKind,
    UnknownFileKindError as UnknownFileKindError,
    classify as classify,
    segment_logs as segment_logs,
)
from ._text import item_line as item_line, kafka_item_line as kafka_item_line
from ._verify import (
    looks_like_partition_dir as looks_like_partition_dir,
    verify_path as verify_path,
)
