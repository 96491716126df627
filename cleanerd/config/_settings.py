"""The daemon's configuration: one validated, immutable tree built from layered sources.

Sources, later wins per setting: defaults < TOML (``--config``) < Kafka properties
(``--kafka-properties``) < environment ``CLEANERD_*`` < command line (``--set``). The merge is
pydantic-settings' (one custom source per layer, see ``config_sources``); each value keeps the
label of the source that gave it, so every problem names the setting, the value, the source and
the rule, and all problems are reported at once rather than the first one only.
"""

from __future__ import annotations

import fnmatch
import math
import os
import ssl
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    PrivateAttr,
    ValidationError,
    ValidationInfo,
    field_validator as validates,
)

from cleanerd._errors import PickledWhole
from cleanerd.config._sources import (
    DAEMON_DEFAULTS,
    DEFAULT,
    SPARK_CONF_PREFIX,
    Sourced,
    env_name,
    is_spark_conf,
    join_listen,
    parse_listen,
    read_sources,
)
from cleanerd.config._tls import TlsError, check_cert_file, server_context
from cleanerd.config._topics import Problem, TopicValue, check_topics, effective_topics
from cleanerd.topics import TopicSettings

__all__ = [
    "RESTART_SETTINGS",
    "CleanerdConfig",
    "ConfigError",
    "ConfigProblem",
    "LoadedConfig",
    "changed_settings",
    "env_name",
    "load_config",
    "restart_only",
]

TLS_CERT, TLS_KEY = "cleanerd.http.tls.cert.file", "cleanerd.http.tls.key.file"
RESTART_SETTINGS = frozenset(
    {
        "log.dirs",
        "cleanerd.http.listen",
        TLS_CERT,
        TLS_KEY,
        "cleanerd.log.format",
        "cleanerd.engine.spark.master",
    }
)
"""Settings a SIGHUP cannot change: the daemon keeps the old value and says so (and every
``cleanerd.engine.spark.conf.*``: the Spark session is built once; see ``restart_only``). The
TLS files' paths are fixed, but a SIGHUP reads the files again (a renewed certificate)."""
MIB = 1 << 20
MAX_CLEANER_THREADS = 64
"""Upper bound of ``log.cleaner.threads``: each is a thread of the daemon's own pool and may
hold a chunk's decompressed records (``format.chunk_payloads_bound``: 512 MiB unless
``max.decompressed.message.bytes`` is set above 128 MiB) besides its
share of the dedupe buffer, and a cleaning keeps one core busy, so past the cores a machine has
more threads only add memory. Fixed rather than a multiple of ``os.cpu_count()`` so that one
config checks the same on every host."""


@dataclass(frozen=True)
class ConfigProblem:
    """One thing wrong with the configuration, in the user's terms."""

    setting: str  # Kafka-style name, or topics."<glob>".<name>
    value: object
    source: str  # default / file PATH / kafka-properties PATH / env VAR / command line
    rule: str

    def line(self) -> str:
        """``log.cleaner.threads = '-1' (env CLEANERD_LOG_CLEANER_THREADS): must be at least 0``."""
        return f"{self.setting} = {self.value!r} ({self.source}): {self.rule}"


class ConfigError(PickledWhole, Exception):
    """The configuration is invalid; ``problems`` lists every reason, one line each in str()."""

    def __init__(self, problems: tuple[ConfigProblem, ...]) -> None:
        super().__init__("\n".join(p.line() for p in problems))
        self.problems = problems


Count = Annotated[int, Field(ge=0)]


class CleanerdConfig(BaseModel):
    """The validated daemon settings (Kafka's defaults) and the per-topic settings."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    log_dirs: tuple[Path, ...] = Field(default=(Path("data"),), min_length=1)
    cleaner_enable: bool = True
    threads: Annotated[int, Field(ge=0, le=MAX_CLEANER_THREADS)] = 1
    cleaner_processes: bool = True  # False: cleanings run in threads of the daemon's process
    dedupe_buffer_size: Count = 134_217_728
    load_factor: float = Field(default=0.9, gt=0.0, le=1.0)
    io_buffer_size: Count = 524_288
    io_max_bytes_per_second: Annotated[float, Field(gt=0.0)] | None = None  # None: unlimited
    backoff_ms: Count = 15_000
    retry_attempts: Count = 3
    retry_backoff_ms: Count = 1_000
    retry_backoff_max_ms: Count = 60_000
    http_host: str | None = "127.0.0.1"  # None: no HTTP server
    http_port: int = Field(default=9404, ge=0, le=65535)
    # both or neither: TLS on the HTTP port (checked by loading them, see config._tls)
    tls_cert_file: Path | None = None
    tls_key_file: Path | None = Field(default=None, validate_default=True)
    admin_token: str | None = None
    status_public: bool = False  # False: /status only for loopback peers or the admin token
    per_partition_metrics: bool = True
    log_format: Literal["auto", "json", "console"] = "auto"
    log_level: Literal["debug", "info", "warning", "error"] = "info"
    shutdown_timeout_ms: int = Field(default=20_000, gt=0)
    spark_master: str | None = None  # None: every partition is cleaned by the local engine
    spark_min_partition_bytes: int = Field(default=10_737_418_240, ge=1)
    spark_task_budget_bytes: int = Field(default=134_217_728, gt=MIB)
    spark_conf: dict[str, str] = Field(default_factory=dict)  # cleanerd.engine.spark.conf.*
    topic_defaults: dict[str, TopicValue] = Field(default_factory=dict)  # Kafka topic names
    topics: tuple[tuple[str, dict[str, TopicValue]], ...] = ()  # [topics."glob"], file order
    _resolved: dict[str, TopicSettings] = PrivateAttr(default_factory=dict)

    @validates("log_dirs", mode="before")
    @classmethod
    def _split_dirs(cls, value: object) -> object:
        """A comma list (properties, env) or a TOML list; relative ones against the cwd now."""
        items = value.split(",") if isinstance(value, str) else value
        if not isinstance(items, list | tuple):
            return items
        return tuple(Path.cwd() / str(item).strip() for item in items if str(item).strip())

    @validates("io_max_bytes_per_second", mode="before")
    @classmethod
    def _unlimited(cls, value: object) -> object:
        """Kafka's default is Double.MAX_VALUE; that, infinity and ``unlimited`` mean no limit."""
        if value is None or (isinstance(value, str) and value.strip().lower() in ("", "unlimited")):
            return None
        try:
            number = float(value)  # type: ignore[arg-type]
        except (TypeError, ValueError):
            return value
        return None if math.isinf(number) or number >= 1.7976931348623157e308 else number

    @validates("log_format", "log_level", mode="before")
    @classmethod
    def _lower(cls, value: object) -> object:
        return value.strip().lower() if isinstance(value, str) else value

    @validates("admin_token", "spark_master", mode="before")
    @classmethod
    def _empty_is_none(cls, value: object) -> object:
        return (value.strip() if isinstance(value, str) else value) or None

    @validates("tls_cert_file", "tls_key_file", mode="before")
    @classmethod
    def _file(cls, value: object) -> object:
        """Empty: none; a relative path against the cwd now (as ``log.dirs``)."""
        if isinstance(value, str | Path):
            text = str(value).strip()
            return Path.cwd() / text if text else None
        return value

    @validates("tls_cert_file")
    @classmethod
    def _cert(cls, value: Path | None) -> Path | None:
        if value is not None:
            try:
                check_cert_file(value)
            except TlsError as e:
                raise ValueError(str(e)) from None
        return value

    @validates("tls_key_file")
    @classmethod
    def _key(cls, value: Path | None, info: ValidationInfo) -> Path | None:
        """Both or neither; the key must load with the certificate (it is that one's key)."""
        cert = info.data.get("tls_cert_file")
        if value is None and cert is not None:
            raise ValueError(f"must be set too when {TLS_CERT} is")
        if value is not None and "tls_cert_file" in info.data and cert is None:
            raise ValueError(f"needs {TLS_CERT} too")
        if value is not None and cert is not None:
            try:
                server_context(cert, value)
            except TlsError as e:
                raise ValueError(f"{e} (with {TLS_CERT} = {str(cert)!r})") from None
        return value

    def server_tls(self) -> ssl.SSLContext | None:
        """The HTTP port's TLS context; None when TLS is off."""
        if self.tls_cert_file is None or self.tls_key_file is None:
            return None
        return server_context(self.tls_cert_file, self.tls_key_file)

    @property
    def http_scheme(self) -> str:
        return "http" if self.tls_cert_file is None else "https"

    @validates("spark_conf", mode="before")
    @classmethod
    def _conf_text(cls, value: object) -> object:
        """Spark conf values are strings (``4g``, ``true``); TOML may give numbers or booleans."""
        if not isinstance(value, dict):
            return value
        return {k: str(v).lower() if isinstance(v, bool) else str(v) for k, v in value.items()}

    @validates("dedupe_buffer_size")
    @classmethod
    def _per_thread(cls, value: int, info: ValidationInfo) -> int:
        """Kafka's rule: each cleaner thread gets more than 1 MiB of dedupe buffer."""
        threads = info.data.get("threads")
        if isinstance(threads, int) and threads > 0 and value / threads <= MIB:
            raise ValueError(
                f"divided by log.cleaner.threads ({threads}) must be more than {MIB} "
                "(1 MiB per cleaner thread)"
            )
        return value

    @validates("retry_backoff_max_ms")
    @classmethod
    def _backoff_cap(cls, value: int, info: ValidationInfo) -> int:
        floor = info.data.get("retry_backoff_ms")
        if isinstance(floor, int) and value < floor:
            raise ValueError(f"must be at least cleanerd.retry.backoff.ms ({floor})")
        return value

    def topic_kafka_settings(self, topic: str) -> dict[str, object]:
        """The topic's Kafka settings: broker defaults, then each matching table in file order."""
        merged: dict[str, object] = dict(self.topic_defaults)
        for glob, table in self.topics:
            if fnmatch.fnmatchcase(topic, glob):
                merged.update(table)
        return merged

    def topic_settings(self, topic: str) -> TopicSettings:
        """The topic's settings (cached per topic); ConfigError when matching tables conflict."""
        found = self._resolved.get(topic)
        if found is None:
            try:
                found = TopicSettings.from_kafka(self.topic_kafka_settings(topic))
            except ValueError as e:
                globs = [g for g, _ in self.topics if fnmatch.fnmatchcase(topic, g)]
                where = " + ".join(f'[topics."{g}"]' for g in globs) or "broker defaults"
                raise ConfigError((ConfigProblem(f"topic {topic}", topic, where, str(e)),)) from e
            self._resolved[topic] = found
        return found


FIELDS = {
    "log.dirs": "log_dirs",
    "log.cleaner.enable": "cleaner_enable",
    "log.cleaner.threads": "threads",
    "log.cleaner.dedupe.buffer.size": "dedupe_buffer_size",
    "log.cleaner.io.buffer.load.factor": "load_factor",
    "log.cleaner.io.buffer.size": "io_buffer_size",
    "log.cleaner.io.max.bytes.per.second": "io_max_bytes_per_second",
    "log.cleaner.backoff.ms": "backoff_ms",
    "cleanerd.cleaner.processes": "cleaner_processes",
    "cleanerd.retry.attempts": "retry_attempts",
    "cleanerd.retry.backoff.ms": "retry_backoff_ms",
    "cleanerd.retry.backoff.max.ms": "retry_backoff_max_ms",
    "cleanerd.admin.token": "admin_token",
    "cleanerd.http.status.public": "status_public",
    TLS_CERT: "tls_cert_file",
    TLS_KEY: "tls_key_file",
    "cleanerd.metrics.per.partition": "per_partition_metrics",
    "cleanerd.log.format": "log_format",
    "cleanerd.log.level": "log_level",
    "cleanerd.shutdown.timeout.ms": "shutdown_timeout_ms",
    "cleanerd.engine.spark.master": "spark_master",
    "cleanerd.engine.spark.min.partition.bytes": "spark_min_partition_bytes",
    "cleanerd.engine.spark.task.budget.bytes": "spark_task_budget_bytes",
}
LISTEN = "cleanerd.http.listen"
SECRET = "cleanerd.admin.token"


def restart_only(name: str) -> bool:
    """A setting a SIGHUP cannot change (``RESTART_SETTINGS`` and the Spark conf)."""
    return name in RESTART_SETTINGS or is_spark_conf(name)


@dataclass(frozen=True)
class LoadedConfig:
    """A validated config with where each setting came from and what was noticed on the way."""

    config: CleanerdConfig
    origins: Mapping[str, str]  # flat name (and topics."glob".name) -> source label
    notes: tuple[str, ...] = ()

    def values(self) -> dict[str, object]:
        """Every flat setting's effective value, daemon settings first, then per-topic ones."""
        return {
            **_daemon_values(self.config),
            **effective_topics(self.config.topic_defaults, self.config.topics),
        }

    def show(self) -> list[tuple[str, str, str]]:
        """(name, value text, source) rows for ``config show``; the admin token is masked."""
        rows = []
        for name, value in self.values().items():
            text = "(set)" if name == SECRET and value else _text(value)
            rows.append((name, text, self.origins.get(name, DEFAULT)))
        return rows


def changed_settings(old: LoadedConfig, new: LoadedConfig) -> list[str]:
    """Flat names whose effective value differs (``topics."glob".name`` for per-topic ones)."""
    before, after = old.values(), new.values()
    return [name for name in {**before, **after} if before.get(name) != after.get(name)]


def _daemon_values(config: CleanerdConfig) -> dict[str, object]:
    out: dict[str, object] = {}
    for name in DAEMON_DEFAULTS:
        if name == LISTEN:
            host = config.http_host
            out[name] = "off" if host is None else join_listen(host, config.http_port)
        elif name == "log.dirs":
            out[name] = ",".join(str(p) for p in config.log_dirs)
        else:
            value = getattr(config, FIELDS[name])
            out[name] = "unlimited" if value is None and "bytes.per" in name else value
    out.update({SPARK_CONF_PREFIX + key: value for key, value in config.spark_conf.items()})
    return out


def _text(value: object) -> str:
    if isinstance(value, bool):
        return str(value).lower()
    return "" if value is None else str(value)


def load_config(
    *,
    config_file: Path | None = None,
    kafka_properties: Path | None = None,
    env: Mapping[str, str] | None = None,
    overrides: Mapping[str, str] | None = None,
) -> LoadedConfig:
    """Read, merge and validate every source (``env`` None: ``os.environ``; ``overrides``: the
    command line's NAME=VALUE pairs). ConfigError lists every problem found."""
    values, tables, findings = read_sources(
        config_file, kafka_properties, os.environ if env is None else env, overrides or {}
    )
    problems = [ConfigProblem(*p) for p in findings.problems]
    notes = list(findings.notes)
    topic_problems: list[Problem] = []
    topic_defaults, topics, topic_origins = check_topics(values, tables, topic_problems, notes)
    problems.extend(ConfigProblem(*p) for p in topic_problems)
    data: dict[str, object] = {"topic_defaults": topic_defaults, "topics": topics}
    origins: dict[str, str] = {}
    for name in DAEMON_DEFAULTS:
        given = values[name]
        origins[name] = given.source
        if name != LISTEN:
            data[FIELDS[name]] = given.value
            continue
        try:
            data["http_host"], data["http_port"] = parse_listen(str(given.value))
        except ValueError as e:
            problems.append(ConfigProblem(name, given.value, given.source, str(e)))
    spark_conf = {n: v for n, v in values.items() if is_spark_conf(n)}
    data["spark_conf"] = {n.removeprefix(SPARK_CONF_PREFIX): v.value for n, v in spark_conf.items()}
    origins.update({n: v.source for n, v in spark_conf.items()})
    config = None
    try:
        config = CleanerdConfig.model_validate(data)
    except ValidationError as e:
        problems.extend(_problems(e, values))
    if problems or config is None:
        raise ConfigError(tuple(problems))
    return LoadedConfig(config, {**origins, **topic_origins}, tuple(notes))


_RULES: dict[str, Callable[[Mapping[str, Any]], str]] = {
    "greater_than_equal": lambda c: f"must be at least {c['ge']}",
    "greater_than": lambda c: f"must be greater than {c['gt']}",
    "less_than_equal": lambda c: f"must be at most {c['le']}",
    "int_parsing": lambda c: "must be an integer",
    "int_type": lambda c: "must be an integer",
    "int_from_float": lambda c: "must be an integer",
    "float_parsing": lambda c: "must be a number",
    "float_type": lambda c: "must be a number",
    "bool_parsing": lambda c: "must be true or false",
    "bool_type": lambda c: "must be true or false",
    "literal_error": lambda c: f"must be one of {c['expected']}",
    "too_short": lambda c: "needs at least one directory",
    "value_error": lambda c: str(c["error"]),
}


def _problems(error: ValidationError, values: Mapping[str, Sourced]) -> Iterator[ConfigProblem]:
    """One problem per pydantic error, named by the Kafka setting the field came from."""
    kafka = {field: name for name, field in FIELDS.items()}
    kafka.update(http_host=LISTEN, http_port=LISTEN)
    seen: set[str] = set()
    for err in error.errors():
        field = str(err["loc"][0]) if err["loc"] else ""
        name = kafka.get(field, field)
        if name in seen:  # a union reports each member; one line per setting is enough
            continue
        seen.add(name)
        given = values.get(name, Sourced(err.get("input"), DEFAULT))
        phrase = _RULES.get(err["type"])
        rule = phrase(err.get("ctx") or {}) if phrase else str(err["msg"])
        yield ConfigProblem(name, given.value, given.source, rule)
