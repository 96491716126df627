"""Producer expiration (``producer.id.expiration.ms``, docs/kafka-format.md §4.10).

Kafka keeps each producer's last batch (at least as an empty header) while the producer is in its
producer state, and drops a producer from that state once it has no open transaction and its
latest batch, data or transaction marker, is ``producer.id.expiration.ms`` old. Its empty batch
then goes at the next cleaning. The logs here are real ``PartitionLog``s cleaned by the engine.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from cleanerd.cli import cli
from cleanerd.compaction._transactions import (
    NEVER_EXPIRE,
    is_producer_expired,
    last_records_of_active_producers,
)
from cleanerd.config import ConfigError, load_config
from cleanerd.storage import PartitionLog, ProducerEntry
from cleanerd.topics import (
    KNOWN_SETTINGS,
    InvalidTopicConfigError,
    TopicCleanerConfig,
    TopicSettings,
)
from tests.support.cleaning import (
    batches_of,
    clean,
    compacted_config,
    last_offsets_per_batch,
    new_log,
    offsets_in_log,
    rec,
)

T = 1_700_000_000_000  # when the producers write
DAY = 86_400_000  # Kafka's default producer.id.expiration.ms
PID = 7


def expiring(ms: int = DAY) -> TopicCleanerConfig:
    return compacted_config(producer_id_expiration_ms=ms)


def superseded_producer_batch(log: PartitionLog) -> None:
    """Offset 0: producer 7's only batch (idempotent, at T); offset 1 overwrites its key."""
    log.append([rec(1, 1, ts=T)], producer_id=PID, producer_epoch=0, base_sequence=0)
    log.append([rec(1, 2, ts=T + 10)])
    log.roll()


# --- the rule ----------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("last_timestamp", "txn_first", "now", "expired"),
    [
        (T, -1, T + DAY - 1, False),
        (T, -1, T + DAY, True),  # Kafka: now - lastTimestamp >= producer.id.expiration.ms
        (T, 5, T + 100 * DAY, False),  # an open transaction keeps it however old
        (T, -1, NEVER_EXPIRE, True),
    ],
)
def test_is_producer_expired(last_timestamp: int, txn_first: int, now: int, expired: bool) -> None:
    entry = ProducerEntry(PID, last_timestamp=last_timestamp, current_txn_first_offset=txn_first)
    assert is_producer_expired(entry, now, DAY) is expired
    assert is_producer_expired(entry, now, NEVER_EXPIRE) is False


# --- the cleaner -------------------------------------------------------------------------------
@pytest.mark.parametrize(("later", "kept"), [(T + DAY - 1, True), (T + DAY, False)])
def test_empty_batch_of_an_expired_producer_goes_at_the_next_cleaning(
    tmp_path: Path, later: int, kept: bool
) -> None:
    log = new_log(tmp_path)
    superseded_producer_batch(log)
    clean(log, now=T + 100, config=expiring())
    # the producer is active: its last batch stays, emptied, with its max timestamp
    assert (last_offsets_per_batch(log), offsets_in_log(log)) == ([0, 1], [1])
    empty = batches_of(log)[0].header
    assert (empty.producer_id, empty.records_count, empty.max_timestamp) == (PID, 0, T)
    clean(log, now=later, config=expiring())
    assert last_offsets_per_batch(log) == ([0, 1] if kept else [1])
    assert offsets_in_log(log) == [1]
    log.close()


def test_expiration_setting_decides(tmp_path: Path) -> None:
    """One cleaning at T + 1 hour: an expiration of one hour removes the batch at once; the
    default day keeps it empty; NEVER_EXPIRE (Kafka's LogCleanerTest) keeps it at any time."""
    hour = 3_600_000
    log = new_log(tmp_path)
    superseded_producer_batch(log)
    clean(log, now=T + hour, config=expiring())
    assert last_offsets_per_batch(log) == [0, 1]
    clean(log, now=2**63 - 1, config=expiring(NEVER_EXPIRE))
    assert last_offsets_per_batch(log) == [0, 1]
    clean(log, now=T + hour, config=expiring(hour))
    assert last_offsets_per_batch(log) == [1]
    log.close()


def test_marker_timestamp_keeps_a_producer_active(tmp_path: Path) -> None:
    """The COMMIT's timestamp, not the data's, is the producer's latest (Kafka's
    ``appendEndTxnMarker`` sets lastTimestamp): a day after the data but less than a day after
    the marker, the emptied data batch is still protected."""
    marker_ts = T + DAY // 2
    log = new_log(tmp_path)
    log.append(
        [rec(1, 1, ts=T)], producer_id=PID, producer_epoch=0, base_sequence=0, transactional=True
    )
    log.append_marker(commit=True, producer_id=PID, producer_epoch=0, timestamp=marker_ts)
    log.append([rec(1, 2, ts=T + 10)])
    log.roll()
    state = log.producer_state()
    assert state.producers[PID].last_timestamp == marker_ts
    clean(log, now=T + DAY + 1, config=expiring())
    assert (last_offsets_per_batch(log), offsets_in_log(log)) == ([0, 1, 2], [1, 2])
    clean(log, now=marker_ts + DAY, config=expiring())
    # expired now: the empty batch goes (its COMMIT is kept this pass: a batch of it was read)
    assert (last_offsets_per_batch(log), offsets_in_log(log)) == ([1, 2], [1, 2])
    log.close()


def test_open_transaction_never_expires(tmp_path: Path) -> None:
    """Producer 7's transaction is still open: however old, it stays in the producer state and
    its last batch is protected. (The range is given by hand, past the LSO, as Kafka's own
    cleaner tests do: a real plan never reaches an open transaction.)"""
    log = new_log(tmp_path)
    log.append([rec(1, 1, ts=T)], producer_id=9, producer_epoch=0, base_sequence=0)  # expires
    log.append(
        [rec(2, 1, ts=T)], producer_id=PID, producer_epoch=0, base_sequence=0, transactional=True
    )
    log.append([rec(1, 2, ts=T + 10), rec(2, 2, ts=T + 10)])
    log.roll()
    late = T + 30 * DAY
    state = log.producer_state()
    assert state.first_unstable_offset == 1
    assert last_records_of_active_producers(state, late, DAY) == {PID: (1, 0)}
    clean(log, 0, 4, now=late, config=expiring())
    assert (last_offsets_per_batch(log), offsets_in_log(log)) == ([1, 3], [2, 3])
    log.close()


def test_compact_option(tmp_path: Path) -> None:
    """``compact --producer-id-expiration-ms`` reaches the cleaner."""
    log = PartitionLog.create(tmp_path / "logs" / "t-0", clock=lambda: 0)
    superseded_producer_batch(log)
    log.close()
    base = ["compact", str(tmp_path / "logs"), "--now", str(T + 1000), "--format", "json"]
    runner = CliRunner()
    kept = runner.invoke(cli, base, catch_exceptions=False)
    assert kept.exit_code == 0, kept.output
    assert json.loads(kept.stdout)["batches_out"] == 2  # the emptied batch of producer 7
    gone = runner.invoke(cli, [*base, "--producer-id-expiration-ms", "500"])
    assert gone.exit_code == 0, gone.output
    assert json.loads(gone.stdout)["batches_out"] == 1
    bad = runner.invoke(cli, [*base, "--producer-id-expiration-ms", "0"])
    assert bad.exit_code == 2
    assert "--producer-id-expiration-ms" in bad.output


# --- the setting -------------------------------------------------------------------------------
def test_setting_from_every_source(tmp_path: Path) -> None:
    assert "producer.id.expiration.ms" in KNOWN_SETTINGS
    default = load_config(env={}).config.topic_settings("t").cleaner
    assert default.producer_id_expiration_ms == DAY
    toml = tmp_path / "cleanerd.toml"
    name = '"producer.id.expiration.ms"'
    toml.write_text(f'{name} = 5000\n[topics."a*"]\n{name} = 7000\n')
    loaded = load_config(config_file=toml, env={}).config
    assert loaded.topic_settings("t").cleaner.producer_id_expiration_ms == 5000
    assert loaded.topic_settings("ab").cleaner.producer_id_expiration_ms == 7000
    props = tmp_path / "server.properties"
    props.write_text("producer.id.expiration.ms=6000\n")
    loaded = load_config(config_file=toml, kafka_properties=props, env={}).config
    assert loaded.topic_settings("t").cleaner.producer_id_expiration_ms == 6000
    env = {"CLEANERD_PRODUCER_ID_EXPIRATION_MS": "8000"}
    assert load_config(env=env).config.topic_settings("t").cleaner.producer_id_expiration_ms == 8000
    pairs = {"producer.id.expiration.ms": "9000"}
    loaded = load_config(env=env, overrides=pairs).config
    assert loaded.topic_settings("t").cleaner.producer_id_expiration_ms == 9000


@pytest.mark.parametrize(
    ("value", "rule"),
    [
        ("0", "must be at least 1"),
        ("-1", "must be at least 1"),
        ("2147483648", "does not fit a Java int"),  # Kafka defines it as an INT
        ("a day", "must be an integer (a Java int)"),
    ],
)
def test_invalid_setting_names_it(value: str, rule: str) -> None:
    with pytest.raises(ConfigError) as e:
        load_config(env={}, overrides={"producer.id.expiration.ms": value})
    assert str(e.value) == f"producer.id.expiration.ms = {value!r} (command line): {rule}"
    with pytest.raises(InvalidTopicConfigError) as direct:
        TopicSettings.from_kafka({"producer.id.expiration.ms": value})
    assert direct.value.setting == "producer.id.expiration.ms"
    assert direct.value.rule == rule


def test_largest_int_is_accepted() -> None:
    settings = TopicSettings.from_kafka({"producer.id.expiration.ms": "2147483647"})
    assert settings.cleaner.producer_id_expiration_ms == 2**31 - 1
