"""Google's C++ snappy 1.1.x (``libsnappy.so.1``) through ctypes: the encoder whose bytes Kafka
writes (docs/kafka-format.md §2.5.2).

Kafka compresses snappy with snappy-java, which wraps the C++ library (snappy 1.1.10 in
snappy-java 1.1.10.x). Other encoders write other, equally valid, bytes: the Rust encoder in
cramjam, and C++ snappy 1.2 (its level 1 searches matches differently). No wheel on PyPI bundles
a 1.1.x library, so cleanerd loads the system's (Debian/Ubuntu ``libsnappy1v5``; 1.1.9 in
bookworm writes what 1.1.10 writes) and uses it only when it passes a probe: one input whose
encoding tells 1.1.x from 1.2 and from cramjam. Without it, ``raw_compressor`` is None and the
caller falls back to cramjam (decodable, other bytes). ctypes releases the GIL during the call.
"""

from __future__ import annotations

import ctypes
import functools
import hashlib
import threading
from collections.abc import Callable
from typing import cast

SONAME = "libsnappy.so.1"
"""The library's soname (snappy 1.1 and 1.2 alike)."""
DEBIAN_PACKAGE = "libsnappy1v5"
_BLOCK = 32 * 1024  # the largest block the xerial framing hands over (docs/kafka-format.md §2.5.2)

_Held = tuple[ctypes.Array[ctypes.c_char], ctypes.c_size_t]

_PROBE = b"".join(b'{"id":%d,"k":"key-%06d"}' % (i, (i * 7919) % 1000) for i in range(13))
# sha256 of snappy-java 1.1.10.8's raw block for _PROBE (157 bytes; C++ snappy 1.2 writes 156,
# cramjam 155): tests/format/test_codec_bytes.py checks it against snappy-java itself
_PROBE_SHA256 = "cb8b46e13943ccc17e118a1e99bf93aa29900aa8d43880c9c15db89c5a5061bd"


def _bind(lib: ctypes.CDLL) -> Callable[[bytes], bytes]:
    compress = lib.snappy_compress
    compress.argtypes = (
        ctypes.c_char_p,
        ctypes.c_size_t,
        ctypes.c_char_p,
        ctypes.POINTER(ctypes.c_size_t),
    )
    compress.restype = ctypes.c_int
    max_len = lib.snappy_max_compressed_length
    max_len.argtypes = (ctypes.c_size_t,)
    max_len.restype = ctypes.c_size_t
    local = threading.local()  # per thread: an output buffer for blocks up to _BLOCK, its size

    def held() -> _Held:
        mine = cast("_Held | None", getattr(local, "held", None))
        if mine is None:
            mine = local.held = (
                ctypes.create_string_buffer(int(max_len(_BLOCK))),
                ctypes.c_size_t(),
            )
        return mine

    def raw(block: bytes) -> bytes:
        """``block`` as one raw snappy block."""
        n = len(block)
        if n > _BLOCK:
            out, size = ctypes.create_string_buffer(int(max_len(n))), ctypes.c_size_t()
        else:
            out, size = held()
        size.value = len(out)
        status = compress(block, n, out, ctypes.byref(size))
        if status != 0:  # snappy_compress fails only on a too-small output buffer
            raise RuntimeError(f"{SONAME}: snappy_compress returned status {status}")
        return memoryview(out)[: size.value].tobytes()

    return raw


@functools.cache
def raw_compressor() -> Callable[[bytes], bytes] | None:
    """``raw(block)``: C++ snappy 1.1.x's raw block for ``block``, or None when
    ``libsnappy.so.1`` is missing or writes other bytes than snappy-java (snappy 1.2)."""
    try:
        raw = _bind(ctypes.CDLL(SONAME))
    except (OSError, AttributeError):
        return None
    if hashlib.sha256(raw(_PROBE)).hexdigest() != _PROBE_SHA256:
        return None
    return raw


def snappy_fallback_reason() -> str | None:
    """Why snappy batches are written with other bytes than Kafka's, or None when they are not:
    what an operator is told once at start (the bytes are valid either way)."""
    if raw_compressor() is not None:
        return None
    return (
        f"{SONAME} (Debian package {DEBIAN_PACKAGE}, C++ snappy 1.1.x) is missing or is another "
        "version: rebuilt snappy batches are written by cramjam, valid for every reader but not "
        "byte-identical to Kafka's"
    )
