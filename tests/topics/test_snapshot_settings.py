"""The snapshot topic settings: Kafka-style names, defaults, and errors naming the setting."""

from __future__ import annotations

import pytest

from cleanerd.topics import InvalidTopicConfigError
from cleanerd.topics._model import SnapshotSettings, TopicSettings


def test_defaults_are_off_and_parsed_from_properties_text() -> None:
    assert TopicSettings.from_kafka({}).snapshot == SnapshotSettings()
    assert SnapshotSettings().enable is False
    s = TopicSettings.from_kafka(
        {
            "snapshot.enable": "TRUE",
            "snapshot.minimum.records": "500",
            "snapshot.retention.count": 3,
            "snapshot.truncate.log": "false",
            "compression.type": "ZSTD",
        }
    ).snapshot
    assert s == SnapshotSettings(True, 500, 3, False, "zstd")


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("snapshot.enable", "yes"),
        ("snapshot.minimum.records", "many"),
        ("snapshot.retention.count", 0),
        ("snapshot.truncate.log", 1),
        ("compression.type", "brotli"),
    ],
)
def test_bad_values_name_the_setting(name: str, value: object) -> None:
    with pytest.raises(InvalidTopicConfigError) as e:
        TopicSettings.from_kafka({name: value})
    assert e.value.setting == name
    assert name in str(e.value)
