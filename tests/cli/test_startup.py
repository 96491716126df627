"""Start-up as an operator meets it: ``cleanerd warmup`` fills the kernel cache so later commands
compile nothing, and ``--help``/``--version`` stay light (no numba, no aiohttp).

Every command runs in a fresh process: numba's in-process dispatchers would hide what a new
process has to compile.
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import click
import pytest
from click.testing import CliRunner

from cleanerd import _jitcache
from cleanerd.cli import COMMANDS, _warmup, cli


def _env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("NUMBA_")}
    env.update(extra)
    return env


def _cleanerd(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "cleanerd", *args],
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )


def _cache_files(cache: Path) -> dict[str, tuple[int, int]]:
    """Every file numba keeps in the cache dir, with size and mtime: a compile adds or rewrites."""
    return {
        str(p.relative_to(cache)): (p.stat().st_size, p.stat().st_mtime_ns)
        for p in cache.rglob("*")
        if p.is_file()
    }


# kernels each command needs on its first run (scan, CRC, record index, map, decide, rebuild,
# write), one signature at least of each
_KERNELS = (
    "format._walk.walk_batches",
    "format._crc.batch_crcs",
    "format._record_index.index_records_into",
    "compaction._offset_map._fill.cache_records",
    "compaction._offset_map._fill.put_cached",
    "compaction._filter.decide_records",
    "compaction._offset_map._fill.mark_winners",
    "compaction._cleaned._rebuild.splice_records",
    "compaction._cleaned._rebuild.write_batches",
    "compaction._strategy.record_versions",
    "compaction._cleaned._writer.gather",
    "compaction._offset_map._map._put_batch",
    "spark._columns._gather",  # cleanerd spark's Arrow columns (the spark extra is installed)
    "spark._columns._header_fields",
)


@pytest.fixture(scope="module")
def warm_cache(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, object]]:
    """A kernel cache filled by one ``cleanerd warmup`` from empty."""
    cache = tmp_path_factory.mktemp("numba-cache")
    done = _cleanerd("warmup", "--format", "json", env=_env(NUMBA_CACHE_DIR=str(cache)))
    assert done.returncode == 0, done.stderr
    return cache, json.loads(done.stdout)


@pytest.mark.slow
def test_warmup_compiles_every_kernel_path(warm_cache: tuple[Path, dict[str, object]]) -> None:
    cache, report = warm_cache
    assert report["cache_dir"] == str(cache)
    assert report["kept"] is True
    compiled = report["compiled"]
    assert isinstance(compiled, list)
    assert report["kernels_compiled"] == len(compiled) > 0
    for kernel in _KERNELS:
        assert any(c.startswith(f"cleanerd.{kernel}(") for c in compiled), kernel
    # read-only (mmapped segment) and writable (rebuilt buffer) arrays are two signatures
    walks = [c for c in compiled if c.startswith("cleanerd.format._walk.walk_batches(")]
    assert len(walks) == 2
    assert report["kernels_loaded_from_cache"] == 0
    assert any(p.suffix == ".nbc" for p in cache.rglob("*"))


@pytest.mark.slow
def test_after_warmup_commands_compile_nothing(
    warm_cache: tuple[Path, dict[str, object]], tmp_path: Path
) -> None:
    cache, _ = warm_cache
    env = _env(NUMBA_CACHE_DIR=str(cache))
    before = _cache_files(cache)
    logdir = tmp_path / "logs"
    for args in (
        ("gen", str(logdir), "--records", "2000", "--keys", "100", "--codec", "zstd",
         "--transactional-producers", "2", "--segment-bytes", "16384"),
        ("compact", str(logdir), "--roll-active", "--delete-retention-ms", "0",
         "--format", "json"),
        ("compact", str(logdir), "--strategy", "timestamp", "--format", "json"),
        ("verify", str(logdir)),
    ):  # fmt: skip
        done = _cleanerd(*args, env=env)
        assert done.returncode == 0, (args, done.stderr)
        if args[0] == "compact":  # and it says so itself
            summary = json.loads(done.stdout.splitlines()[0])
            assert (summary["kernels_compiled"], summary["compile_seconds"]) == (0, 0.0)
        if args[1:3] == (str(logdir), "--roll-active"):  # the first compaction: work done
            assert summary["records_out"] < summary["records_in"]
    assert _cache_files(cache) == before


# Runs a command in a fresh process as the console script does, then says which kernels it loaded
# (from their kept copies without numba, or by numba's dispatcher), how many of them numba
# compiled, and every module imported.
_PROBE = """
import json, sys
sys.argv = ["cleanerd", *sys.argv[1:]]
from cleanerd.cli import main
try:
    main()
except SystemExit as stop:
    code = stop.code
modules = sorted(sys.modules)  # importlib's imports too, which -X importtime does not list
from cleanerd._kernel import kernels
loaded, compiled = [], 0
for k in kernels():
    d = k.numba_dispatcher
    if k.light_signatures() or (d is not None and d.overloads):
        loaded.append(k.__module__ + "." + k.__name__)
    if d is not None:
        compiled += sum(d.stats.cache_misses.values())
report = {"code": code, "loaded": sorted(loaded), "compiled": compiled, "modules": modules}
print(json.dumps(report))
"""
# numba imports these only to prepare its compiler (numba.np.arraymath) or to rebuild a kernel
# that allocates an array (numba.np.arrayobj): a warm read-only command needs neither
_COMPILER = {"numba.np.arraymath", "numba.np.arrayobj"}
# what verify and dump never use: the daemon, the engine, Spark, settings, the event loop, and
# the CRC library (the kernel checks CRCs)
_NOT_FOR_READING = {
    "asyncio", "aiohttp", "pyspark", "pyarrow", "pydantic", "pydantic_settings", "structlog",
    "rich", "prometheus_client", "crc32c", "cleanerd.service", "cleanerd.spark",
    "cleanerd.compaction", "cleanerd.scheduling", "cleanerd.config", "cleanerd.workload",
}  # fmt: skip


def _probe(*args: str, env: dict[str, str]) -> dict[str, Any]:
    done = subprocess.run(
        [sys.executable, "-c", _PROBE, *args], check=False, env=env, capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr
    report: dict[str, Any] = json.loads(done.stdout.splitlines()[-1])
    return report


@pytest.mark.slow
def test_warm_verify_and_dump_load_only_the_kernels_they_call(
    warm_cache: tuple[Path, dict[str, object]], tmp_path: Path
) -> None:
    """After ``cleanerd warmup`` a read-only command loads its four kernels from their kept
    copies and imports no numba at all (issue 24: numba's import and its compiler's set-up were
    half of ``verify``'s run); lz4 payloads decode in ``lay_out_native``."""
    cache, _ = warm_cache
    env = _env(NUMBA_CACHE_DIR=str(cache))
    logdir = tmp_path / "logs"
    gen = _cleanerd("gen", str(logdir), "--records", "1000", "--codec", "lz4", env=env)
    assert gen.returncode == 0, gen.stderr
    segment = next((logdir / "demo-0").glob("*.log"))
    for args in (("verify", str(logdir)), ("dump", str(segment))):
        report = _probe(*args, env=env)
        assert report["code"] == 0, args
        assert report["loaded"] == [
            "cleanerd.format._crc.batch_crcs",
            "cleanerd.format._native_lay_out.lay_out_native",
            "cleanerd.format._record_index.index_records_into",
            "cleanerd.format._walk.walk_batches",
        ], args
        assert report["compiled"] == 0, args
        modules = set(report["modules"])
        assert "numba._helperlib" in modules  # the probe saw the kernels' runtime
        assert sorted(modules & ({"numba"} | _COMPILER | _NOT_FOR_READING)) == [], args


@pytest.mark.parametrize("command", ["verify", "dump"])
def test_read_only_commands_import_no_daemon_engine_or_spark(command: str) -> None:
    """Loading ``verify`` or ``dump`` imports the format, storage and inspect code it runs, and
    none of what only the daemon, a cleaning or Spark use."""
    report = _probe(command, "--help", env=_env())
    assert report["code"] == 0
    modules = set(report["modules"])
    assert {f"cleanerd.cli._{command}", "cleanerd.inspect"} <= modules
    assert "numba" not in modules  # until a kernel runs, and then only when it must compile
    not_used = {
        m for m in modules if any(m == n or m.startswith(f"{n}.") for n in _NOT_FOR_READING)
    }
    assert sorted(not_used | (modules & _COMPILER)) == []


def _no_warm(*_: object, **__: object) -> _warmup.WarmupReport:
    raise AssertionError("warm() ran: it compiles for a minute or more")


def test_warmup_says_where_the_cache_is_kept(monkeypatch: pytest.MonkeyPatch) -> None:
    report = _warmup.WarmupReport([], 0.0, 0.5, 34, "/var/tmp/cleanerd-numba-65534", ["none: ..."])
    monkeypatch.setattr(_jitcache, "_temporary", None)
    monkeypatch.setattr(_warmup, "warm", lambda *_, **__: report)
    result = CliRunner().invoke(cli, ["warmup"])
    assert result.exit_code == 0, result.output
    assert "cache: /var/tmp/cleanerd-numba-65534, kept for later runs" in result.stdout


def test_warmup_with_no_cache_to_keep_compiles_nothing_and_says_why(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """It used to compile for 99 s into a temporary dir and then delete it."""
    why = "/nonexistent/.cache/cleanerd/numba is not writable; /var/tmp/... is not writable"
    temporary = _jitcache.TemporaryCache("/tmp/cleanerd-numba-x", why)
    monkeypatch.setattr(_jitcache, "_temporary", temporary)
    monkeypatch.setattr(_warmup, "warm", _no_warm)
    for fmt in ("text", "json"):
        result = CliRunner().invoke(cli, ["warmup", "--format", fmt])
        assert result.exit_code == 1, result.output
        assert result.stdout == ""
        assert "compiled nothing" in result.stderr
        assert why in result.stderr
        assert "/tmp/cleanerd-numba-x is removed at exit" in result.stderr
        assert "NUMBA_CACHE_DIR" in result.stderr


def _imported(*args: str) -> tuple[subprocess.CompletedProcess[str], set[str]]:
    """Run ``python -X importtime -m cleanerd ARGS``: its result and every module it imported."""
    done = subprocess.run(
        [sys.executable, "-X", "importtime", "-m", "cleanerd", *args],
        env=_env(),
        capture_output=True,
        text=True,
        check=False,
    )
    modules = {
        line.rsplit("|", 1)[1].strip()
        for line in done.stderr.splitlines()
        if line.startswith("import time:") and line.count("|") == 2
    }
    return done, modules


@pytest.mark.parametrize("args", [("--help",), ("-h",), ("--version",)])
def test_help_and_version_import_no_numba_and_no_aiohttp(args: tuple[str, ...]) -> None:
    done, modules = _imported(*args)
    assert done.returncode == 0, done.stderr
    assert "click" in modules  # the import log was read
    heavy = sorted(m for m in modules if m.split(".")[0] in {"numba", "aiohttp", "numpy"})
    assert heavy == []
    commands = sorted(m for m in modules if m.startswith("cleanerd.cli.") and m != "cleanerd.cli")
    assert commands == ["cleanerd.cli._early_stop", "cleanerd.cli._errors"]


def test_help_lists_every_command_with_its_short_help() -> None:
    done, _ = _imported("--help")
    listing = done.stdout.split("Commands:", 1)[1]
    rows = {line.split(None, 1)[0]: line.split(None, 1)[1] for line in listing.splitlines() if line}
    assert rows == {name: entry.short_help for name, entry in COMMANDS.items()}
    assert rows["spark"] == "Compact or read Kafka log dirs on Spark (needs the spark extra)."
    assert rows["warmup"].startswith("Compile every numba kernel")


def test_every_listed_command_loads_where_its_module_exists() -> None:
    """A wrong module or attribute in COMMANDS fails here, not in front of a user (``spark``'s
    module comes with the Spark engine and is checked once it exists)."""
    for name, entry in COMMANDS.items():
        if importlib.util.find_spec(entry.module) is None:
            assert name == "spark"
            continue
        command = cli.get_command(click.Context(cli), name)
        assert isinstance(command, click.Command), name
