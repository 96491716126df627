"""Text lines for ``cleanerd dump``, close to Kafka's ``kafka-dump-log.sh`` output.

Rendered from the same dicts as ``--format json`` so the two formats can never disagree. Field
names and order follow Kafka's ``DumpLogSegments`` so habits (and greps) carry over; keys and
values are shown as UTF-8 text, or as ``hex:<bytes>`` when they are not valid UTF-8.
"""

from __future__ import annotations

from collections.abc import Mapping

from cleanerd.format import INT_MAX
from cleanerd.inspect._dump import Item


def _int(item: Mapping[str, object], key: str) -> int:
    value = item[key]
    assert isinstance(value, int)
    return value


def _bool(value: object) -> str:
    return "true" if value else "false"


def _sequence(base_sequence: int, delta: int) -> int:
    """Kafka's ``incrementSequence``: wraps past Int.MaxValue to 0; -1 stays -1."""
    if base_sequence < 0:
        return -1
    seq = base_sequence + delta
    return seq - INT_MAX - 1 if seq > INT_MAX else seq


def batch_line(b: Mapping[str, object]) -> str:
    """Kafka's batch line (``position`` is the byte position of the batch in the file)."""
    base, last = _int(b, "base_offset"), _int(b, "last_offset")
    horizon = b["delete_horizon_ms"]
    horizon_text = "OptionalLong.empty" if horizon is None else f"OptionalLong[{horizon}]"
    if _int(b, "magic") < 2:  # a legacy message: DumpLogSegments prints its offset only
        head = f"offset: {last}"
    else:
        head = (
            f"baseOffset: {base} lastOffset: {last} count: {b['count']}"
            f" baseSequence: {b['base_sequence']}"
            f" lastSequence: {_sequence(_int(b, 'base_sequence'), last - base)}"
            f" producerId: {b['producer_id']} producerEpoch: {b['producer_epoch']}"
            f" partitionLeaderEpoch: {b['partition_leader_epoch']}"
            f" isTransactional: {_bool(b['transactional'])} isControl: {_bool(b['control'])}"
            f" deleteHorizonMs: {horizon_text}"
        )
    return (
        f"{head} position: {b['position']}"
        f" {b['timestamp_type']}: {b['max_timestamp']} size: {b['size']} magic: {b['magic']}"
        f" compresscodec: {b['compression']} crc: {b['crc']} isvalid: true"
    )


def _bytes_text(text: object, hex_text: object) -> str:
    if hex_text is None:
        return "null"
    return str(text) if text is not None else f"hex:{hex_text}"


def record_line(r: Mapping[str, object], *, kafka: bool = False) -> str:
    """Kafka's ``| offset: ...`` line; the key is always shown, the value only with --values.
    ``kafka``: as Kafka's tool prints it, key and payload only with the value (--print-data-log)
    and a null key or payload left out."""
    batch = r["batch"]
    assert isinstance(batch, dict)
    headers = r["headers"]
    assert isinstance(headers, list)
    key_hex = r["key_hex"]
    key_size = -1 if key_hex is None else len(str(key_hex)) // 2
    delta = _int(r, "offset") - _int(batch, "base_offset")
    line = (
        f"| offset: {r['offset']} {batch['timestamp_type']}: {r['timestamp']}"
        f" keySize: {key_size} valueSize: {r['value_len']}"
    )
    if _int(batch, "magic") >= 2:  # legacy messages have neither (DumpLogSegments)
        line += (
            f" sequence: {_sequence(_int(batch, 'base_sequence'), delta)}"
            f" headerKeys: [{','.join(str(h['key']) for h in headers)}]"
        )
    control = r["control"]
    if control is not None:
        if "coordinator_epoch" in r:
            return f"{line} endTxnMarker: {control} coordinatorEpoch: {r['coordinator_epoch']}"
        return f"{line} controlType: {control}"
    if kafka:
        return line + _kafka_data(r)
    line += f" key: {_bytes_text(r['key'], key_hex)}"
    if "value" in r:
        if r["value_len"] == -1:
            line += " payload: null"
        else:
            line += f" payload: {_bytes_text(r['value'], r.get('value_hex', ''))}"
    return line


def _kafka_data(r: Mapping[str, object]) -> str:
    if "value" not in r:
        return ""
    key = "" if r["key_hex"] is None else f" key: {_bytes_text(r['key'], r['key_hex'])}"
    if r["value_len"] == -1:
        return key
    return f"{key} payload: {_bytes_text(r['value'], r.get('value_hex', ''))}"


def _optional_long(value: object) -> str:
    """Java's ``OptionalLong`` text, as Kafka prints a snapshot's open transaction."""
    return "OptionalLong.empty" if value is None else f"OptionalLong[{value}]"


def producer_snapshot_line(e: Mapping[str, object]) -> str:
    """Kafka's line for one entry of a producer-state ``.snapshot``."""
    line = (
        f"producerId: {e['producer_id']} producerEpoch: {e['producer_epoch']}"
        f" coordinatorEpoch: {e['coordinator_epoch']}"
        f" currentTxnFirstOffset: {_optional_long(e['current_txn_first_offset'])}"
        f" lastTimestamp: {e['last_timestamp']}"
    )
    batch = e["batch"]
    if isinstance(batch, dict):
        line += (
            f" firstSequence: {batch['first_sequence']} lastSequence: {batch['last_sequence']}"
            f" lastOffset: {batch['last_offset']} offsetDelta: {batch['offset_delta']}"
            f" timestamp: {batch['timestamp']}"
        )
    return line


def kafka_item_line(item: Item) -> str:
    """A dump item as Kafka's tool prints it (its --files, --deep-iteration... options)."""
    if item["type"] == "record":
        return record_line(item, kafka=True)
    return item_line(item)


def item_line(item: Item) -> str:
    """Any dump item as one text line."""
    kind = item["type"]
    if kind == "record":
        return record_line(item)
    if kind == "producer_snapshot":
        return producer_snapshot_line(item)
    if kind == "batch":
        return batch_line(item)
    if kind == "offset_index":
        return f"offset: {item['offset']} position: {item['position']}"
    if kind == "time_index":
        return f"timestamp: {item['timestamp']} offset: {item['offset']}"
    if kind == "txn_index":
        return (
            f"version: 0 producerId: {item['producer_id']} firstOffset: {item['first_offset']}"
            f" lastOffset: {item['last_offset']} lastStableOffset: {item['last_stable_offset']}"
        )
    return " ".join(f"{key}: {value}" for key, value in item.items() if key != "type")
