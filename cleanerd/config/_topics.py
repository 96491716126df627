"""The per-topic part of the configuration: broker defaults of topic settings and each
``[topics."glob"]`` table, checked setting by setting and then as a whole.

Apart from ``config`` because it is one idea (Kafka's topic settings, by their Kafka names) and
the daemon tree only stores its result. Problems are plain (setting, value, source, rule)
tuples, as ``config_sources`` reports them, so ``config`` words them all the same way.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from cleanerd.config._sources import Sourced, Tables, suggest, topic_key
from cleanerd.topics import (
    BROKER_TOPIC_DEFAULTS,
    KNOWN_SETTINGS,
    UNUSED_TOPIC_SETTINGS,
    InvalidTopicConfigError,
    TopicSettings,
    parse_cleanup_policy,
)

TopicValue = str | int | float | bool
Problem = tuple[str, object, str, str]  # setting, value, source, rule

Entry = tuple[str, Sourced]  # (name in messages, value with its source)


def check_topics(
    values: Mapping[str, Sourced], tables: Tables, problems: list[Problem], notes: list[str]
) -> tuple[dict[str, TopicValue], list[tuple[str, dict[str, TopicValue]]], dict[str, str]]:
    """Broker defaults of topic settings, then each ``[topics."glob"]`` over them, validated by
    ``TopicSettings.from_kafka``: each setting alone, then the table as a whole (cross rules)."""
    origins: dict[str, str] = {}
    broker: dict[str, Entry] = {}
    for name, (topic_name, _default) in BROKER_TOPIC_DEFAULTS.items():
        origins[name] = values[name].source
        broker[topic_name] = (name, values[name])
    defaults = _check_table(broker, {}, broker, problems)
    topics = []
    for glob, table in tables.items():
        entries: dict[str, Entry] = {}
        for name, given in table.items():
            key = topic_key(glob, name)
            origins[key] = given.source
            if name in KNOWN_SETTINGS:
                entries[name] = (key, given)
            elif name in UNUSED_TOPIC_SETTINGS:
                notes.append(f"{key} ({given.source}): not used by the cleaner; ignored")
            else:
                problems.append((key, given.value, given.source, suggest(name, KNOWN_SETTINGS)))
        inherited = {n: (topic_key(glob, n), s) for n, (_, s) in broker.items()}
        topics.append((glob, _check_table(entries, defaults, inherited, problems)))
    return defaults, topics, origins


def _check_table(
    entries: Mapping[str, Entry],
    base: Mapping[str, TopicValue],
    inherited: Mapping[str, Entry],
    problems: list[Problem],
) -> dict[str, TopicValue]:
    """The valid entries, normalised; a problem for each invalid one and for a conflict."""
    out: dict[str, TopicValue] = {}
    for name, (key, given) in entries.items():
        value = given.value
        if isinstance(value, list):  # cleanup.policy = ["compact", "delete"]
            value = ",".join(str(v) for v in value)
        if not isinstance(value, str | int | float | bool):
            problems.append((key, value, given.source, "must be a string or a number"))
            continue
        try:
            TopicSettings.from_kafka({name: value})
        except ValueError as e:
            problems.append((key, given.value, given.source, _rule(e, name)))
            continue
        out[name] = _normal(name, value)
    if out:  # the valid ones together: what fails now is a cross rule (min lag <= max lag)
        try:
            TopicSettings.from_kafka({**base, **out})
        except ValueError as e:
            setting = getattr(e, "setting", "")
            key, given = entries.get(setting) or inherited[setting]
            problems.append((key, given.value, given.source, _rule(e, setting)))
    return out


def _rule(error: ValueError, name: str) -> str:
    """The rule part of an engine error (``name = value: rule`` or ``name: rule``)."""
    if isinstance(error, InvalidTopicConfigError):
        return error.rule
    text = str(error)
    if text.startswith(name):
        return text[len(name) :].lstrip(" =").partition(": ")[2] or text
    return text


def _normal(name: str, value: TopicValue) -> TopicValue:
    """One spelling per value, so a reload that only re-spells a value changes nothing."""
    if not isinstance(value, str):
        return value
    text = value.strip()
    if name == "cleanup.policy":
        compact, delete = parse_cleanup_policy(text)
        return ",".join(p for p, on in (("compact", compact), ("delete", delete)) if on)
    if name == "compaction.strategy":
        return text.lower()
    if name == "compaction.strategy.header":
        return value
    for kind in (int, float):
        try:
            return kind(text)
        except ValueError:
            pass
    return text


def effective_topics(
    topic_defaults: Mapping[str, TopicValue], topics: Iterable[tuple[str, Mapping[str, TopicValue]]]
) -> dict[str, object]:
    """Flat names (broker ones, then ``topics."glob".name``) and their effective values."""
    out: dict[str, object] = {
        name: topic_defaults[topic] for name, (topic, _) in BROKER_TOPIC_DEFAULTS.items()
    }
    for glob, table in topics:
        out.update({topic_key(glob, name): value for name, value in table.items()})
    return out
