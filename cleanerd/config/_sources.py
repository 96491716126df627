"""Where cleanerd's settings come from: the names it knows, and one reader per source.

Every source yields flat Kafka-style names (``log.cleaner.threads``) with the value as written
and a label saying where it was written (``file cleanerd.toml``, ``env CLEANERD_...``). The
labels travel with the values through pydantic-settings' merge, so whichever source wins a
setting, ``config show`` and every error message can still say where the value came from.
"""

from __future__ import annotations

import difflib
import re
import tomllib
from collections.abc import Callable, Mapping
from contextvars import ContextVar
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import javaproperties
from pydantic import Field
from pydantic.fields import FieldInfo
from pydantic_settings import BaseSettings, PydanticBaseSettingsSource, SettingsConfigDict

from cleanerd.topics import BROKER_TOPIC_DEFAULTS


@dataclass(frozen=True)
class DaemonSetting:
    """One daemon setting: its name, its default as a file would write it, and what it does
    (the reference table in docs/configuration.md is generated from these)."""

    name: str
    default: object
    meaning: str


DAEMON_SETTINGS = (
    DaemonSetting(
        "log.dirs",
        "./data",
        "The log dirs to compact (a list, or one comma-separated string). Relative paths resolve "
        "against the current directory when the config is loaded.",
    ),
    DaemonSetting(
        "log.cleaner.enable", True, "`false`: nothing is cleaned; the daemon only reports."
    ),
    DaemonSetting(
        "log.cleaner.threads", 1, "Cleaning workers, at most 64; `0`: report only, clean nothing."
    ),
    DaemonSetting(
        "log.cleaner.dedupe.buffer.size",
        134_217_728,
        "Bytes of offset maps all workers share (a log asks for what it needs, up to all of "
        "it); more than 1 MiB a worker.",
    ),
    DaemonSetting(
        "log.cleaner.io.buffer.load.factor",
        0.9,
        "How full an offset map may get, in (0, 1]: a log with more keys is cleaned in more "
        "passes.",
    ),
    DaemonSetting(
        "log.cleaner.io.buffer.size",
        524_288,
        "Accepted so a Kafka config loads; cleanerd sizes its reads itself.",
    ),
    DaemonSetting(
        "log.cleaner.io.max.bytes.per.second",
        "unlimited",
        "One throttle on the bytes all cleanings read and write, as Kafka's cleaner throttles.",
    ),
    DaemonSetting(
        "log.cleaner.backoff.ms",
        15_000,
        "Longest wait between two surveys of the log dirs when no log needs cleaning.",
    ),
    DaemonSetting(
        "cleanerd.cleaner.processes",
        True,
        "`true`: each worker cleans in a process of its own (every core; about 100 MiB a "
        "worker); `false`: in threads of the daemon's process.",
    ),
    DaemonSetting(
        "cleanerd.retry.attempts",
        3,
        "Retries of a partition whose cleaning failed before it is marked uncleanable.",
    ),
    DaemonSetting(
        "cleanerd.retry.backoff.ms", 1_000, "Delay before the first retry; doubled each retry."
    ),
    DaemonSetting("cleanerd.retry.backoff.max.ms", 60_000, "The longest delay between retries."),
    DaemonSetting(
        "cleanerd.http.listen",
        "127.0.0.1:9404",
        "Where `/metrics`, `/healthz`, `/readyz`, `/status` and the admin API listen "
        "(`host:port`); `off`: no HTTP port.",
    ),
    DaemonSetting(
        "cleanerd.http.status.public",
        False,
        "`false`: `/status` answers only loopback clients and bearers of the admin token.",
    ),
    DaemonSetting(
        "cleanerd.http.tls.cert.file",
        "",
        "PEM certificate (then any intermediates) for HTTPS on that port; with the key file, "
        "or neither. A SIGHUP reads both files again.",
    ),
    DaemonSetting("cleanerd.http.tls.key.file", "", "PEM private key of that certificate."),
    DaemonSetting(
        "cleanerd.admin.token",
        "",
        "Bearer token clients beyond loopback need for admin requests (and `/status` unless "
        "it is public).",
    ),
    DaemonSetting(
        "cleanerd.metrics.per.partition",
        True,
        "Per-partition gauges; turn off for many partitions.",
    ),
    DaemonSetting(
        "cleanerd.log.format",
        "auto",
        "`auto` (console on a terminal, else JSON), `json` or `console`.",
    ),
    DaemonSetting("cleanerd.log.level", "info", "`debug`, `info`, `warning` or `error`."),
    DaemonSetting(
        "cleanerd.shutdown.timeout.ms",
        20_000,
        "How long a stop waits for running cleanings to abort; past it the daemon exits 1 (a "
        "cleaning process is killed).",
    ),
    DaemonSetting(
        "cleanerd.engine.spark.master",
        "",
        "Spark master for logs too big for one machine (`local[4]`, `spark://host:7077`, "
        "`yarn`, ...); empty: no Spark.",
    ),
    DaemonSetting(
        "cleanerd.engine.spark.min.partition.bytes",
        10_737_418_240,
        "Dirty bytes from which a log is cleaned on Spark instead of by a worker.",
    ),
    DaemonSetting(
        "cleanerd.engine.spark.task.budget.bytes",
        134_217_728,
        "One Spark task's offset map; a log that needs more is deduplicated by a shuffle (plan B).",
    ),
)
"""The daemon's own settings, in the order docs/configuration.md lists them."""

DAEMON_DEFAULTS: dict[str, object] = {s.name: s.default for s in DAEMON_SETTINGS}
"""Daemon settings and their defaults, as they would be written in a file."""

SPARK_CONF_PREFIX = "cleanerd.engine.spark.conf."
"""Settings named ``cleanerd.engine.spark.conf.<spark key>`` pass ``<spark key>`` to the daemon's
Spark session (a prefix, like Kafka's ``listener.name.*``: in TOML a table of quoted keys)."""

TIME_SYNONYMS: dict[str, tuple[str, int]] = {
    "log.roll.hours": ("log.roll.ms", 3_600_000),
    "log.roll.jitter.hours": ("log.roll.jitter.ms", 3_600_000),
    "log.retention.minutes": ("log.retention.ms", 60_000),
    "log.retention.hours": ("log.retention.ms", 3_600_000),
}
"""Coarser spellings of a ms setting -> (ms name, ms per unit); finer ones win (Kafka's rule)."""

ALIASES = {"log.dir": "log.dirs"}  # Kafka: log.dirs wins when both are set
SETTINGS = frozenset((*DAEMON_DEFAULTS, *BROKER_TOPIC_DEFAULTS))
"""Canonical top-level names: what ``config show`` lists."""
KNOWN = frozenset((*SETTINGS, *TIME_SYNONYMS, *ALIASES))
IGNORED_ENV = frozenset({"CLEANERD_FIXTURES"})  # the test suite's, not a setting
TOPICS = "topics"

DEFAULT = "default"
COMMAND_LINE = "command line"


@dataclass(frozen=True)
class Sourced:
    """A raw value and where it came from."""

    value: object
    source: str


@dataclass
class Findings:
    """What the sources saw besides values: problems (setting, value, source, rule) and notes."""

    problems: list[tuple[str, object, str, str]] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)


def is_spark_conf(name: str) -> bool:
    """A Spark conf passthrough name (``cleanerd.engine.spark.conf.spark.executor.memory``)."""
    return name.startswith(SPARK_CONF_PREFIX) and len(name) > len(SPARK_CONF_PREFIX)


def env_name(name: str) -> str:
    """``log.cleaner.threads`` -> ``CLEANERD_LOG_CLEANER_THREADS``; drops a ``cleanerd.`` prefix."""
    bare = name.removeprefix("cleanerd.")
    return "CLEANERD_" + bare.upper().replace(".", "_").replace("-", "_")


ENV_NAMES = {env_name(name): name for name in sorted(KNOWN)}


def suggest(name: str, names: frozenset[str] | set[str] = KNOWN) -> str:
    """The rule for an unknown name, with the closest known one when there is one."""
    close = difflib.get_close_matches(name, sorted(names), n=1)
    return "unknown setting" + (f"; did you mean {close[0]}?" if close else "")


def topic_key(glob: str, name: str) -> str:
    """How a per-topic setting is named in messages and in ``config show``."""
    return f'{TOPICS}."{glob}".{name}'


def flatten(table: Mapping[str, Any], prefix: str = "") -> dict[str, object]:
    """TOML reads unquoted ``log.cleaner.threads = 2`` as nested tables: join the keys back."""
    out: dict[str, object] = {}
    for key, value in table.items():
        if isinstance(value, dict):
            out.update(flatten(value, f"{prefix}{key}."))
        else:
            out[f"{prefix}{key}"] = value
    return out


def join_listen(host: str, port: int) -> str:
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def parse_listen(text: str) -> tuple[str | None, int]:
    """``host:port``, ``[v6]:port`` or ``off`` -> (host, port); (None, 0) for off."""
    text = text.strip()
    if text.lower() == "off":
        return None, 0
    match = re.fullmatch(r"\[([^\]]+)\]:(\d+)|([^:\[\]]*):(\d+)", text)
    if match is None:
        raise ValueError("must be host:port, [ipv6]:port or off")
    host = match.group(1) or match.group(3)
    port = int(match.group(2) or match.group(4))
    if not host or port > 65535:
        raise ValueError("needs a host and a port between 0 and 65535")
    return host, port


def parse_properties(text: str) -> list[tuple[str, str, int]]:
    """``java.util.Properties.load`` rules: (key, value, first line number) in file order.

    ``javaproperties`` does the escapes (``\\uXXXX``, ``\\t``, escaped separators), the
    continuations and the comments, so a broker's file reads here as the broker reads it. Values
    lose trailing blanks as Kafka's ``ConfigDef`` trims them. A bad ``\\u`` escape raises
    ``ValueError`` naming its line.
    """
    out: list[tuple[str, str, int]] = []
    line = 1
    try:
        for element in javaproperties.parse(text):
            if isinstance(element, javaproperties.KeyValue):
                out.append((element.key, element.value.rstrip(), line))
            line += len(_LINE_END.findall(element.source))
    except javaproperties.InvalidUEscapeError as e:
        raise ValueError(f"line {line}: {e}") from None
    return out


_LINE_END = re.compile(r"\r\n|\r|\n")  # Java's line terminators, not str.splitlines' many


class FlatSource(PydanticBaseSettingsSource):
    """A pydantic-settings source yielding ``{"values": {name: Sourced}, "topics": {...}}``.

    Subclasses fill ``values``/``topics`` in ``read``; problems and notes go to ``findings``.
    pydantic-settings merges the dicts of all sources per key, highest priority winning.
    """

    def __init__(self, settings_cls: type[BaseSettings], findings: Findings) -> None:
        super().__init__(settings_cls)
        self.findings = findings
        self.values: dict[str, Sourced] = {}
        self.topics: dict[str, dict[str, Sourced]] = {}

    def read(self) -> None:
        """Fill ``values`` and ``topics``."""

    def get_field_value(self, field: FieldInfo, field_name: str) -> tuple[Any, str, bool]:
        """Unused: ``__call__`` builds the whole mapping at once."""
        return None, field_name, False

    def __call__(self) -> dict[str, Any]:
        self.read()
        return {"values": self.values, "topics": self.topics}

    def put(self, name: str, value: object, source: str, *, strict: bool = True) -> None:
        """Keep a top-level setting, or report it unknown (an error, or a note if not strict)."""
        if name in KNOWN or is_spark_conf(name):
            self.values[name] = Sourced(value, source)
        elif strict:
            self.findings.problems.append((name, value, source, suggest(name)))
        else:
            self.findings.notes.append(f"{name} ({source}): not a cleanerd setting; ignored")


class TomlSource(FlatSource):
    """``--config FILE``: top-level settings, and ``[topics."<glob>"]`` tables in file order."""

    def __init__(self, settings_cls: type[BaseSettings], findings: Findings, path: Path) -> None:
        super().__init__(settings_cls, findings)
        self.path = path
        self.label = f"file {path}"

    def read(self) -> None:
        try:
            doc = tomllib.loads(self.path.read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as e:
            self.findings.problems.append(("(file)", str(self.path), self.label, str(e)))
            return
        topics = doc.pop(TOPICS, {})
        for name, value in flatten(doc).items():
            self.put(name, value, self.label)
        if not isinstance(topics, dict):
            self.findings.problems.append(
                (TOPICS, topics, self.label, 'expected [topics."<glob>"] tables')
            )
            return
        for glob, table in topics.items():
            if not isinstance(table, dict):
                self.findings.problems.append(
                    (f'{TOPICS}."{glob}"', table, self.label, "expected a table of topic settings")
                )
                continue
            self.topics[glob] = {
                name: Sourced(value, self.label) for name, value in flatten(table).items()
            }


class PropertiesSource(FlatSource):
    """``--kafka-properties FILE``: a broker's ``server.properties``; foreign keys are notes."""

    def __init__(self, settings_cls: type[BaseSettings], findings: Findings, path: Path) -> None:
        super().__init__(settings_cls, findings)
        self.path = path
        self.label = f"kafka-properties {path}"

    def read(self) -> None:
        try:
            text = self.path.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as e:
            self.findings.problems.append(("(file)", str(self.path), self.label, str(e)))
            return
        try:
            pairs = parse_properties(text)
        except ValueError as e:
            self.findings.problems.append(("(file)", str(self.path), self.label, str(e)))
            return
        for key, value, _line in pairs:
            self.put(key, value, self.label, strict=False)


class EnvSource(FlatSource):
    """``CLEANERD_*`` variables; one that names no setting is a problem (likely a typo)."""

    def __init__(
        self, settings_cls: type[BaseSettings], findings: Findings, env: Mapping[str, str]
    ) -> None:
        super().__init__(settings_cls, findings)
        self.env = env

    def read(self) -> None:
        for var in sorted(self.env):
            if not var.startswith("CLEANERD_") or var in IGNORED_ENV:
                continue
            label = f"env {var}"
            if var in ENV_NAMES:
                self.values[ENV_NAMES[var]] = Sourced(self.env[var], label)
            else:
                bare = {n.removeprefix("CLEANERD_") for n in ENV_NAMES}
                rule = suggest(var.removeprefix("CLEANERD_"), bare)
                rule = rule.replace("setting", "variable").replace("mean ", "mean CLEANERD_")
                if var.startswith(env_name(SPARK_CONF_PREFIX)):
                    rule = (
                        "Spark conf keys have dots, which variable names cannot carry: set it "
                        f"in the config file or with --set {SPARK_CONF_PREFIX}KEY=VALUE"
                    )
                self.findings.problems.append((var, self.env[var], label, rule))


class CommandLineSource(FlatSource):
    """``--set NAME=VALUE`` pairs; ``topics."<glob>".NAME=VALUE`` sets a per-topic value."""

    def __init__(
        self, settings_cls: type[BaseSettings], findings: Findings, pairs: Mapping[str, str]
    ) -> None:
        super().__init__(settings_cls, findings)
        self.pairs = pairs

    def read(self) -> None:
        for name, value in self.pairs.items():
            prefix = f'{TOPICS}."'
            if name.startswith(prefix) and '".' in name[len(prefix) :]:
                glob, _, setting = name[len(prefix) :].partition('".')
                self.topics.setdefault(glob, {})[setting] = Sourced(value, COMMAND_LINE)
            else:
                self.put(name, value, COMMAND_LINE)


class _Defaults(FlatSource):
    def read(self) -> None:
        for name, value in DAEMON_DEFAULTS.items():
            self.values[name] = Sourced(value, DEFAULT)
        for name, (_topic, value) in BROKER_TOPIC_DEFAULTS.items():
            self.values[name] = Sourced(value, DEFAULT)


Chain = Callable[[type[BaseSettings]], tuple[PydanticBaseSettingsSource, ...]]
_CHAIN: ContextVar[Chain] = ContextVar("cleanerd_config_chain")


class _Layers(BaseSettings):
    """What the sources gave, merged per setting (highest priority first), each with its label."""

    model_config = SettingsConfigDict(extra="ignore")
    values: dict[str, Any] = Field(default_factory=dict)  # name -> Sourced
    topics: dict[str, dict[str, Any]] = Field(default_factory=dict)  # glob -> name -> Sourced

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        return _CHAIN.get()(settings_cls)


Tables = dict[str, dict[str, Sourced]]


def read_sources(
    config_file: Path | None,
    kafka_properties: Path | None,
    env: Mapping[str, str],
    overrides: Mapping[str, str],
) -> tuple[dict[str, Sourced], Tables, Findings]:
    """Merge defaults < TOML < properties < env < command line, per setting and per topic table.

    Topic tables keep the TOML file's order; globs first given on the command line come last.
    Coarse time synonyms and ``log.dir`` are resolved (``resolve_synonyms``).
    """
    findings = Findings()

    def chain(cls: type[BaseSettings]) -> tuple[PydanticBaseSettingsSource, ...]:
        layers: list[FlatSource] = [_Defaults(cls, findings)]
        if config_file is not None:
            layers.append(TomlSource(cls, findings, config_file))
        if kafka_properties is not None:
            layers.append(PropertiesSource(cls, findings, kafka_properties))
        layers.append(EnvSource(cls, findings, env))
        layers.append(CommandLineSource(cls, findings, overrides))
        return tuple(reversed(layers))  # pydantic-settings: the first source wins

    token = _CHAIN.set(chain)
    try:
        merged = _Layers()
    finally:
        _CHAIN.reset(token)
    values: dict[str, Sourced] = dict(merged.values)
    resolve_synonyms(values, findings)
    return values, dict(merged.topics), findings


def resolve_synonyms(values: dict[str, Sourced], findings: Findings) -> None:
    """Hours/minutes spellings become the ms setting unless a finer one is given (Kafka's rule:
    ms over minutes over hours, whatever the source); ``log.dir`` counts only without ``log.dirs``.
    """
    given = {name: values.pop(name) for name in list(values) if name in TIME_SYNONYMS}
    for coarse in sorted(given, key=lambda n: TIME_SYNONYMS[n][1]):  # finer ones first
        target, unit = TIME_SYNONYMS[coarse]
        raw = given[coarse]
        if target in values and values[target].source != DEFAULT:
            findings.notes.append(
                f"{coarse} ({raw.source}) ignored: {target} is given ({values[target].source})"
            )
            continue
        try:
            number = int(str(raw.value).strip())
        except ValueError:
            findings.problems.append((coarse, raw.value, raw.source, "must be an integer"))
            continue
        ms = number * unit
        if target == "log.retention.ms" and ms < 0:
            ms = -1  # Kafka's logRetentionTimeMillis: any negative retention means unlimited
        values[target] = Sourced(ms, f"{raw.source}, as {coarse}")
    alias = values.pop("log.dir", None)
    if alias is not None and values["log.dirs"].source == DEFAULT:
        values["log.dirs"] = Sourced(alias.value, f"{alias.source}, as log.dir")
