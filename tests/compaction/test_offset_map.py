"""The offset map and the KIP-280 strategies against Kafka's OffsetMapTest and a plain-dict model.

The model: per key, the winner is the record with the highest offset (offset strategy), or the
highest (has_version, version, offset) (timestamp and header strategies, docs/kafka-format.md §5).
"""

from __future__ import annotations

import struct
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from cleanerd.compaction._offset_map._map import (
    OFFSET_SLOT_BYTES,
    VERSIONED_SLOT_BYTES,
    OffsetMap,
    slot_bytes,
)
from cleanerd.compaction._offset_map._table import ZERO_HASH_REMAP
from cleanerd.compaction._strategy import compute_versions, record_versions, wins
from cleanerd.format import (
    Compression,
    Record,
    build_batch,
    index_batches,
    kernels as k,
    scan_batches,
)
from cleanerd.format._batch_view import decode_headers
from cleanerd.topics import Strategy, StrategyConfig

FUZZ = settings(max_examples=150)
TIMESTAMP = StrategyConfig(Strategy.TIMESTAMP)
HEADER = StrategyConfig(Strategy.HEADER, "v")


def key_hash(key: bytes) -> tuple[int, int]:
    h1, h2 = k.murmur3_128(np.frombuffer(key, dtype=np.uint8), 0, len(key))
    return int(h1), int(h2)


def hashes_of(keys: list[bytes]) -> np.ndarray[Any, Any]:
    return np.array([key_hash(x) for x in keys], dtype=np.uint64).reshape(-1, 2)


def random_hashes(n: int, seed: int = 0) -> np.ndarray[Any, Any]:
    return np.random.default_rng(seed).integers(1, 2**64, size=(n, 2), dtype=np.uint64)


# --- Kafka's OffsetMapTest (docs/kafka-format.md §7) ---------------------------------------------


@pytest.mark.parametrize("items", [10, 100, 1000, 5000])
@pytest.mark.parametrize("config", [StrategyConfig(), TIMESTAMP])
def test_basic_validation(items: int, config: StrategyConfig) -> None:
    m = OffsetMap(items * 48, config)
    h = hashes_of([str(i).encode() for i in range(items)])
    offsets = np.arange(items, dtype=np.int64)
    assert m.put_batch(h, offsets, offsets, np.ones(items, bool)) == (items, False)
    got, _ver, _has = m.get(h)
    assert (got == offsets).all()
    assert m.size == items
    assert m.latest_offset == items - 1
    assert m.utilization == m.size / m.slots
    m.clear()
    assert m.size == 0
    assert m.latest_offset == -1
    assert (m.get(h)[0] == -1).all()


def test_get_missing_key_on_full_map() -> None:
    m = OffsetMap(24 * 64, load_factor=1.0)
    h = random_hashes(65)
    assert m.put_batch(h[:64], np.arange(64)) == (64, False)
    assert m.size == m.slots == 64
    assert m.utilization == 1.0
    assert m.get(h[64:])[0].tolist() == [-1]
    assert m.should_retain(h[64:], np.array([0])).tolist() == [True]
    assert (m.get(h[:64])[0] == np.arange(64)).all()


# --- sizing ---------------------------------------------------------------------------------------


def test_slot_arithmetic() -> None:
    assert slot_bytes(Strategy.OFFSET) == OFFSET_SLOT_BYTES == 24
    assert slot_bytes(Strategy.HEADER) == slot_bytes(TIMESTAMP) == VERSIONED_SLOT_BYTES == 32
    m = OffsetMap(1000)
    assert (m.slots, m.max_entries, m.memory_bytes) == (41, 36, 984)
    v = OffsetMap(1000, TIMESTAMP)
    assert (v.slots, v.max_entries, v.memory_bytes) == (31, 27, 992)
    kafka = OffsetMap(134217728)  # Kafka's default dedupe buffer: docs/kafka-format.md §4.6
    assert (kafka.slots, kafka.max_entries) == (5592405, 5033164)
    assert OffsetMap(1000, load_factor=0.5).max_entries == 20


@pytest.mark.parametrize("budget", [0, 23, 24, 47])
def test_too_small_map_is_refused(budget: int) -> None:
    with pytest.raises(ValueError, match="slots x load factor"):
        OffsetMap(budget)


@pytest.mark.parametrize("lf", [0.0, -0.5, 1.5, float("nan")])
def test_bad_load_factor(lf: float) -> None:
    with pytest.raises(ValueError, match=r"log\.cleaner\.io\.buffer\.load\.factor"):
        OffsetMap(10_000, load_factor=lf)


def test_two_slots_hold_one_key() -> None:
    m = OffsetMap(48)
    assert (m.slots, m.max_entries) == (2, 1)
    h = random_hashes(2)
    assert m.put_batch(h, np.array([3, 4])) == (1, True)
    assert m.get(h)[0].tolist() == [3, -1]


# --- the full rule --------------------------------------------------------------------------------


def test_full_rule_stops_on_next_keyed_record_even_a_duplicate() -> None:
    m = OffsetMap(24 * 10, load_factor=0.5)  # 10 slots, 5 entries
    h = random_hashes(5)
    dup = np.vstack([h, h[:1], random_hashes(3, seed=1)])
    nxt, full = m.put_batch(dup, np.arange(9))
    assert (nxt, full) == (5, True)
    assert m.size == 5
    assert m.latest_offset == 4
    assert m.get(h[:1])[0].tolist() == [0]  # the duplicate at offset 5 was not put
    # the next pass resumes where this one stopped
    m.clear()
    assert m.put_batch(dup, np.arange(9), start_index=nxt) == (9, False)
    assert m.size == 4
    assert m.latest_offset == 8
    assert m.get(h[:1])[0].tolist() == [5]


def test_unkeyed_records_never_trigger_full() -> None:
    m = OffsetMap(24 * 10, load_factor=0.5)
    h = random_hashes(9)
    keyed = np.array([True] * 5 + [False, False, True, False])
    assert m.put_batch(h, np.arange(9), keyed=keyed) == (7, True)
    keyed[7] = False
    m.clear()
    assert m.put_batch(h, np.arange(9), keyed=keyed) == (9, False)
    assert m.size == 5
    assert m.latest_offset == 4


def test_update_latest_offset() -> None:
    m = OffsetMap(1000)
    m.put_batch(random_hashes(3), np.array([10, 11, 12]))
    m.update_latest_offset(20)
    assert m.latest_offset == 20


def test_bad_arguments() -> None:
    m = OffsetMap(1000)
    with pytest.raises(ValueError, match="uint64"):
        m.get(np.zeros(4, dtype=np.uint64))
    with pytest.raises(ValueError, match="negative"):
        m.put_batch(random_hashes(2), np.array([1, -1]))
    with pytest.raises(ValueError, match="header name"):
        OffsetMap(1000, Strategy.HEADER)


# --- (0, 0) hash ----------------------------------------------------------------------------------


@pytest.mark.parametrize("config", [StrategyConfig(), HEADER])
def test_zero_hash_is_a_real_key(config: StrategyConfig) -> None:
    assert key_hash(b"") == (0, 0)  # murmur3 of the empty key: the empty-slot pattern
    m = OffsetMap(24 * 8 * 2, config)
    h = np.array([[0, 0], [1, 2], [0, 0]], dtype=np.uint64)
    m.put_batch(h, np.array([1, 2, 3]), np.zeros(3, np.int64), np.ones(3, bool))
    assert m.size == 2
    assert m.get(h)[0].tolist() == [3, 2, 3]
    assert m.should_retain(h, np.array([1, 2, 3]), np.zeros(3), np.ones(3, bool)).tolist() == [
        False,
        True,
        True,
    ]
    assert int(ZERO_HASH_REMAP) != 0


# --- strategies against the dict model ------------------------------------------------------------


def model(
    recs: list[tuple[int, int, int, bool]], versioned: bool
) -> dict[int, tuple[int, int, bool]]:
    """key -> (offset, version, has_version) of its winner; recs are (key, offset, version, has)."""
    best: dict[int, tuple[int, int, bool]] = {}
    for key, off, ver, has in recs:
        cur = best.get(key)
        if cur is None:
            best[key] = (off, ver, has)
        elif not versioned:
            best[key] = (max(off, cur[0]), 0, False)
        elif (has, ver if has else 0, off) > (cur[2], cur[1] if cur[2] else 0, cur[0]):
            best[key] = (off, ver, has)
    return best


RECORDS = st.lists(
    st.tuples(
        st.integers(0, 7),  # key
        st.integers(1, 3),  # offset gap
        st.integers(-2, 2),  # version: small, so ties are frequent
        st.booleans(),  # has version
    ),
    max_size=60,
)
CONFIGS = st.sampled_from([StrategyConfig(), TIMESTAMP, HEADER])


def _arrays(
    raw: list[tuple[int, int, int, bool]], config: StrategyConfig
) -> tuple[list[tuple[int, int, int, bool]], Any, Any, Any, Any]:
    recs = []
    off = 0
    for key, gap, ver, has_version in raw:
        off += gap
        recs.append((key, off, ver, has_version or config.strategy is Strategy.TIMESTAMP))
    h = hashes_of([b"key-%d" % r[0] for r in recs])
    offs = np.array([r[1] for r in recs], dtype=np.int64)
    vers = np.array([r[2] for r in recs], dtype=np.int64)
    has = np.array([r[3] for r in recs], dtype=np.bool_)
    return recs, h, offs, vers, has


@pytest.mark.slow
@FUZZ
@given(RECORDS, CONFIGS, st.booleans())
def test_strategy_matches_model(
    raw: list[tuple[int, int, int, bool]], config: StrategyConfig, shuffle: bool
) -> None:
    recs, h, offs, vers, has = _arrays(raw, config)
    if shuffle:  # the winner does not depend on arrival order
        perm = np.random.default_rng(len(recs)).permutation(len(recs))
        recs = [recs[i] for i in perm]
        h, offs, vers, has = h[perm], offs[perm], vers[perm], has[perm]
    if not config.versioned and shuffle:
        return  # Kafka's offset map takes the later put, by design: offsets arrive in order
    m = OffsetMap(32 * 64, config)
    assert m.put_batch(h, offs, vers, has) == (len(recs), False)
    expected = model(recs, config.versioned)
    assert m.size == len(expected)
    got_off, got_ver, got_has = m.get(hashes_of([b"key-%d" % key for key in range(8)]))
    for key in range(8):
        if key not in expected:
            assert got_off[key] == -1
            continue
        off, ver, hv = expected[key]
        assert got_off[key] == off
        if config.versioned:
            assert bool(got_has[key]) == hv
            assert not hv or got_ver[key] == ver
    retained = m.should_retain(h, offs, vers, has)
    assert retained.tolist() == [expected[r[0]][0] == r[1] for r in recs]


@pytest.mark.slow
@FUZZ
@given(RECORDS, CONFIGS, st.integers(2, 6))
def test_tiny_map_passes_cover_everything(
    raw: list[tuple[int, int, int, bool]], config: StrategyConfig, slots: int
) -> None:
    """Passes over a map of a few slots: each pass holds the winners of exactly its range."""
    recs, h, offs, vers, has = _arrays(raw, config)
    m = OffsetMap(m_bytes := slots * slot_bytes(config), config)
    assert m.memory_bytes == m_bytes
    start, passes = 0, 0
    while start < len(recs):
        m.clear()
        nxt, full = m.put_batch(h, offs, vers, has, start_index=start)
        assert nxt > start
        assert full == (nxt < len(recs))
        part = recs[start:nxt]
        expected = model(part, config.versioned)
        assert m.size == len(expected) <= m.max_entries
        assert m.latest_offset == part[-1][1]
        retained = m.should_retain(h[start:nxt], offs[start:nxt], vers[start:nxt], has[start:nxt])
        assert retained.tolist() == [expected[r[0]][0] == r[1] for r in part]
        start, passes = nxt, passes + 1
    assert passes <= len(recs)


@FUZZ
@given(st.lists(st.tuples(st.integers(0, 3), st.integers(0, 30)), max_size=40, unique=True))
def test_clustered_hashes(pairs: list[tuple[int, int]]) -> None:
    """Hashes crowded onto 4 adjacent home slots: Robin Hood displacement and wrap-around."""
    m = OffsetMap(24 * 50, load_factor=1.0)
    h = np.array([[46 + a + 50 * b, b] for a, b in pairs], dtype=np.uint64).reshape(-1, 2)
    offs = np.arange(len(pairs), dtype=np.int64)
    assert m.put_batch(h, offs) == (len(pairs), False)
    assert (m.get(h)[0] == offs).all()
    assert m.put_batch(h, offs + 100) == (len(pairs), False)
    assert (m.get(h)[0] == offs + 100).all()
    assert m.size == len(pairs)
    missing = np.array([[46 + a + 50 * 99, 99] for a in range(4)], dtype=np.uint64)
    assert (m.get(missing)[0] == -1).all()


def test_older_record_beats_newer_under_timestamp() -> None:
    m = OffsetMap(1000, TIMESTAMP)
    h = hashes_of([b"k", b"k"])
    m.put_batch(h, np.array([5, 9]), np.array([200, 100]), np.ones(2, bool))
    assert m.get(h[:1])[0].tolist() == [5]
    assert m.should_retain(h, np.array([5, 9]), np.array([200, 100])).tolist() == [True, False]


def test_header_presence_beats_version_and_ties_go_to_offset() -> None:
    m = OffsetMap(1000, HEADER)
    h = hashes_of([b"a", b"a", b"b", b"b", b"c", b"c"])
    offs = np.arange(6)
    vers = np.array([-9, 100, 7, 7, 0, 0])
    has = np.array([True, False, True, True, False, False])
    m.put_batch(h, offs, vers, has)
    got = m.get(h)
    assert got[0].tolist() == [0, 0, 3, 3, 5, 5]
    assert got[1][0] == -9
    assert got[2].tolist() == [True, True, True, True, False, False]


def test_record_the_map_never_saw_is_kept_if_it_would_win() -> None:
    m = OffsetMap(1000, TIMESTAMP)
    h = hashes_of([b"k"])
    m.put_batch(h, np.array([10]), np.array([50]), np.ones(1, bool))
    older = m.should_retain(
        np.vstack([h, h]), np.array([3, 4]), np.array([60, 40]), np.ones(2, bool)
    )
    assert older.tolist() == [True, False]


def test_wins_truth_table() -> None:
    assert wins(1, 0, True, 2, 5, False)
    assert not wins(2, 5, False, 1, 0, True)
    assert wins(1, 6, True, 2, 5, True)
    assert wins(3, 5, True, 2, 5, True)
    assert not wins(2, 5, True, 3, 5, True)
    assert wins(3, 1, False, 2, 9, False)


# --- settings -------------------------------------------------------------------------------------


def test_strategy_config_rules() -> None:
    assert StrategyConfig(Strategy.HEADER, "") == StrategyConfig()
    assert StrategyConfig(Strategy.HEADER, "  ").strategy is Strategy.OFFSET
    assert StrategyConfig(Strategy.TIMESTAMP, "v") == TIMESTAMP
    assert not StrategyConfig().versioned
    assert TIMESTAMP.versioned
    assert HEADER.versioned
    assert StrategyConfig(Strategy.HEADER, "vér").header_name_bytes == "vér".encode()


def test_parse_settings() -> None:
    broker = {
        "log.cleaner.compaction.strategy": "header",
        "log.cleaner.compaction.strategy.header": "ver",
    }
    assert StrategyConfig.from_broker(broker) == StrategyConfig(Strategy.HEADER, "ver")
    assert StrategyConfig.from_broker({}) == StrategyConfig()
    assert StrategyConfig.from_topic({}, broker) == StrategyConfig(Strategy.HEADER, "ver")
    topic = {"compaction.strategy": " Timestamp "}
    assert StrategyConfig.from_topic(topic, broker) == TIMESTAMP
    off = {
        "log.cleaner.compaction.strategy": "offset",
        "log.cleaner.compaction.strategy.header": "h",
    }
    only_strategy = {"compaction.strategy": "header"}
    assert StrategyConfig.from_topic(only_strategy, off) == StrategyConfig(Strategy.HEADER, "h")
    blank = {"compaction.strategy": "header", "compaction.strategy.header": ""}
    assert StrategyConfig.from_topic(blank, broker) == StrategyConfig()
    with pytest.raises(ValueError, match=r"^log\.cleaner\.compaction\.strategy: unknown"):
        StrategyConfig.from_broker({"log.cleaner.compaction.strategy": "newest"})
    with pytest.raises(ValueError, match=r"^compaction\.strategy: unknown"):
        StrategyConfig.from_topic({"compaction.strategy": "lru"}, broker)
    with pytest.raises(ValueError, match=r"^compaction\.strategy\.header: expected a string"):
        StrategyConfig.from_topic({"compaction.strategy.header": 5})
    with pytest.raises(ValueError, match=r"^log\.cleaner\.compaction\.strategy: expected"):
        StrategyConfig.from_broker({"log.cleaner.compaction.strategy": 1})


# --- record versions from real batches ------------------------------------------------------------

V = struct.Struct(">q").pack
HEADER_CASES: list[tuple[tuple[tuple[str, bytes | None], ...], int | None, bool]] = [
    ((("v", V(42)),), 42, False),
    ((("v", V(-7)),), -7, False),
    ((("v", V(-(2**63))),), -(2**63), False),
    ((), None, False),
    ((("other", V(1)),), None, False),
    ((("vv", V(1)), ("", V(2))), None, False),
    ((("v", None),), None, True),
    ((("v", b"\x00\x01"),), None, True),
    ((("v", V(1) + b"\x00"),), None, True),
    ((("v", b""),), None, True),
    ((("v", V(1)), ("x", b"y"), ("v", V(2))), 2, False),
    ((("v", V(5)), ("v", b"bad")), None, True),
    ((("v", b"bad"), ("v", V(9))), 9, False),
]


@pytest.mark.parametrize("codec", [Compression.NONE, Compression.LZ4])
def test_record_versions_on_real_batches(codec: Compression) -> None:
    recs = [
        Record(offset=i, timestamp=1000 + i, key=b"k%d" % i, value=b"x" * i, headers=hdrs)
        for i, (hdrs, _v, _w) in enumerate(HEADER_CASES)
    ]
    buf = build_batch(recs[:5], compression=codec) + build_batch(recs[5:], compression=codec)
    payload, records = index_batches(buf, scan_batches(buf).batches)
    versions = np.full(len(records), -7, dtype=np.int64)  # every row is written
    has = np.ones(len(records), dtype=np.bool_)
    wrong = record_versions(payload, records, np.frombuffer(b"v", np.uint8), versions, has)
    assert wrong == sum(w for _h, _v, w in HEADER_CASES)
    for i, (_hdrs, expected, _w) in enumerate(HEADER_CASES):
        assert bool(has[i]) == (expected is not None)
        if expected is not None:
            assert versions[i] == expected
    # the oracle: the slow Python header decoder agrees on which header is last
    for i, row in enumerate(records):
        last = [
            v
            for n, v in decode_headers(payload, int(row[k.R_HEADERS_POS]), int(row[9]))
            if n == "v"
        ]
        assert bool(has[i]) == (bool(last) and last[-1] is not None and len(last[-1]) == 8)
    hv, hh, hw = compute_versions(HEADER, payload, records)
    assert (hv == versions).all()
    assert (hh == has).all()
    assert hw == wrong
    tv, th, tw = compute_versions(TIMESTAMP, payload, records)
    assert tv.tolist() == [r.timestamp for r in recs]
    assert th.all()
    assert tw == 0
    ov, oh, ow = compute_versions(StrategyConfig(), payload, records)
    assert not ov.any()
    assert not oh.any()
    assert ow == 0


def test_record_versions_multibyte_name() -> None:
    recs = [Record(offset=0, timestamp=0, key=b"k", value=b"v", headers=(("vér", V(3)),))]
    buf = build_batch(recs)
    payload, records = index_batches(buf, scan_batches(buf).batches)
    versions, has, _ = compute_versions(StrategyConfig(Strategy.HEADER, "vér"), payload, records)
    assert versions.tolist() == [3]
    assert has.tolist() == [True]
