"""deploy/systemd: the unit passes ``systemd-analyze verify`` and agrees with the package.

What would break a real install silently: an ExecStart naming a command or option cleanerd does
not have, a stop timeout shorter than the daemon's own shutdown timeout (systemd would SIGKILL
a cleaning the daemon was about to abandon cleanly), a watchdog the daemon pings too rarely,
a user or directory the sysusers/tmpfiles snippets do not create, an example environment file
with a variable the daemon refuses.
"""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from pathlib import Path, PurePosixPath

import click
import pytest

from cleanerd.cli import COMMANDS, cli
from cleanerd.config import CleanerdConfig, load_config
from cleanerd.config._sources import ENV_NAMES
from cleanerd.service._systemd import SystemdNotifier
from cleanerd.storage import PAUSES_FILE
from tests.support.tools import require

REPO = Path(__file__).resolve().parents[2]
SYSTEMD = REPO / "deploy" / "systemd"
UNIT = SYSTEMD / "cleanerd.service"
VENV_CLEANERD = Path(sys.executable).parent / "cleanerd"  # the console script of this venv
Unit = dict[str, list[tuple[str, str]]]
_ASSIGNMENT = re.compile(r"#?([A-Z][A-Z0-9_]*)=(.*)$")  # "#NAME=value": an example to uncomment


def _parse_unit(text: str) -> Unit:
    """Sections -> (key, value) in file order; keys may repeat (Environment=)."""
    sections: Unit = {}
    current: list[tuple[str, str]] | None = None
    for number, raw in enumerate(text.splitlines(), 1):
        line = raw.strip()
        if not line or line.startswith(("#", ";")):
            continue
        if line.startswith("[") and line.endswith("]"):
            current = sections.setdefault(line[1:-1], [])
            continue
        if current is None or "=" not in line or line.endswith("\\"):
            raise AssertionError(f"{UNIT}:{number}: cannot read {raw!r}")
        key, value = line.split("=", 1)
        current.append((key.strip(), value.strip()))
    return sections


UNIT_DATA = _parse_unit(UNIT.read_text())
SERVICE = UNIT_DATA["Service"]


def _all(key: str) -> list[str]:
    return [v for k, v in SERVICE if k == key]


def _one(key: str) -> str:
    values = _all(key)
    assert len(values) == 1, f"{UNIT}: {key}= given {len(values)} times"
    return values[0]


def _usec(span: str) -> int:
    """A systemd time span in microseconds, as systemd itself reads it."""
    out = subprocess.run(
        [require("systemd-analyze"), "timespan", span], capture_output=True, text=True, check=True
    ).stdout
    line = next(x for x in out.splitlines() if x.strip().startswith("μs:"))
    return int(line.split(":", 1)[1])


def _exec(key: str) -> list[str]:
    """An Exec*= command line without systemd's prefixes (``-``, ``@``, ``+``, ...)."""
    return shlex.split(_one(key).lstrip("-@:+!"))


def _environment_file_example() -> dict[str, str]:
    """Every assignment of the example /etc/default/cleanerd, commented out or not."""
    found = (
        _ASSIGNMENT.match(raw) for raw in (SYSTEMD / "cleanerd.default").read_text().splitlines()
    )
    return {m[1]: m[2] for m in found if m}


def _tmpfiles_dirs() -> dict[str, tuple[str, str]]:
    """tmpfiles.d ``d`` lines: path -> (user, group)."""
    out = {}
    for raw in (SYSTEMD / "cleanerd.tmpfiles.conf").read_text().splitlines():
        fields = raw.split()
        if fields and fields[0] == "d":
            out[fields[1]] = (fields[3], fields[4])
    return out


# --- systemd-analyze -----------------------------------------------------------------------------
def _verify(unit_dir: Path, cleanerd: Path) -> subprocess.CompletedProcess[str]:
    """``systemd-analyze verify`` on a copy whose Exec lines run ``cleanerd`` (no other change):
    verify wants the binary to exist. No running systemd is needed with a unit search path."""
    unit_dir.mkdir(exist_ok=True)
    text = UNIT.read_text().replace("/opt/cleanerd/bin/cleanerd", str(cleanerd))
    copy = unit_dir / UNIT.name
    copy.write_text(text)
    env = {
        **os.environ,
        "SYSTEMD_LOG_LEVEL": "info",
        "SYSTEMD_UNIT_PATH": f"{unit_dir}:",  # the trailing ":" keeps the built-in path too
    }
    return subprocess.run(
        [require("systemd-analyze"), "verify", "--man=no", str(copy)],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
        check=False,
    )


def _about_the_unit(result: subprocess.CompletedProcess[str]) -> list[str]:
    return [
        line
        for line in (result.stdout + result.stderr).splitlines()
        if "cleanerd" in line  # the unit's name, its path, or the command it runs
    ]


def test_systemd_analyze_verify_is_clean(tmp_path: Path) -> None:
    assert VENV_CLEANERD.is_file(), VENV_CLEANERD
    result = _verify(tmp_path / "good", VENV_CLEANERD)
    assert _about_the_unit(result) == []
    assert result.returncode == 0, result.stdout + result.stderr


def test_verify_does_report_a_broken_unit(tmp_path: Path) -> None:
    """The clean result above means something: the same call names a missing binary."""
    result = _verify(tmp_path / "bad", tmp_path / "no-such-cleanerd")
    assert result.returncode != 0
    assert any("no-such-cleanerd" in line for line in _about_the_unit(result))


# --- the unit against the package ----------------------------------------------------------------
def test_the_issue_s_settings_are_there() -> None:
    assert _one("Type") == "notify"
    assert _one("NotifyAccess") == "main"
    assert _one("Restart") == "on-failure"
    assert _one("ExecReload") == "/bin/kill -HUP $MAINPID"
    assert "-/etc/default/cleanerd" in _all("EnvironmentFile")
    for key in ("NoNewPrivileges", "ProtectHome", "PrivateTmp", "PrivateDevices"):
        assert _one(key) == "yes", key
    assert _one("ProtectSystem") == "strict"
    assert _one("SystemCallFilter") == "@system-service"
    families = set(_one("RestrictAddressFamilies").split())
    assert families == {"AF_UNIX", "AF_INET", "AF_INET6"}  # notify socket, HTTP port
    assert int(_one("LimitNOFILE")) >= 65536


def test_exec_lines_run_commands_cleanerd_has() -> None:
    start = _exec("ExecStart")
    assert PurePosixPath(start[0]).name == "cleanerd"
    assert "cleanerd" in _pyproject_scripts()  # the console script ExecStart names
    for key in ("ExecStart", "ExecStartPre"):
        argv = _exec(key)
        assert PurePosixPath(argv[0]) == PurePosixPath(start[0]), key
        assert argv[1] in COMMANDS, f"{key}: cleanerd has no command {argv[1]!r}"
    assert start[1] == "run"
    run = cli.get_command(click.Context(cli), "run")
    assert run is not None
    options = {opt for p in run.params for opt in getattr(p, "opts", ())}
    assert {a for a in start[2:] if a.startswith("--")} <= options
    assert start[start.index("--config") + 1] == "/etc/cleanerd/cleanerd.toml"
    assert "/etc/cleanerd" in {f"/etc/{d}" for d in _all("ConfigurationDirectory")}


def _pyproject_scripts() -> dict[str, str]:
    import tomllib  # noqa: PLC0415 (only this test reads pyproject)

    scripts: dict[str, str] = tomllib.loads((REPO / "pyproject.toml").read_text())["project"][
        "scripts"
    ]
    return scripts


def test_the_stop_timeout_covers_the_daemon_s_shutdown_timeout() -> None:
    """SIGTERM -> the daemon waits cleanerd.shutdown.timeout.ms for a cleaning, then exits 1 by
    itself; systemd must not SIGKILL it first. Checked for the default, the example config and
    the example environment file."""
    stop_s = _usec(_one("TimeoutStopSec")) / 1e6
    shipped = load_config(config_file=REPO / "config" / "cleanerd.toml", env={})
    example = _environment_file_example()
    env = {"CLEANERD_SHUTDOWN_TIMEOUT_MS": example["CLEANERD_SHUTDOWN_TIMEOUT_MS"]}
    with_env = load_config(config_file=REPO / "config" / "cleanerd.toml", env=env)
    for ms in (
        CleanerdConfig().shutdown_timeout_ms,
        shipped.config.shutdown_timeout_ms,
        with_env.config.shutdown_timeout_ms,
    ):
        assert ms / 1000 + 5 <= stop_s, (ms, stop_s)


def test_the_daemon_pings_the_watchdog_well_inside_its_interval() -> None:
    watchdog_usec = _usec(_one("WatchdogSec"))
    notifier = SystemdNotifier.from_env(
        {
            "NOTIFY_SOCKET": "/run/systemd/notify",
            "WATCHDOG_USEC": str(watchdog_usec),
            "WATCHDOG_PID": "4242",
        },
        pid=4242,
    )
    assert notifier.watchdog_interval_s == pytest.approx(watchdog_usec / 2 / 1e6)
    # a loaded machine must not miss a deadline: at least 10 s between a ping and the deadline
    assert notifier.watchdog_interval_s is not None
    assert watchdog_usec / 1e6 - notifier.watchdog_interval_s >= 10


def test_user_and_directories_come_from_the_sysusers_and_tmpfiles_snippets() -> None:
    user = _one("User")
    sysusers = [
        line.split()
        for line in (SYSTEMD / "cleanerd.sysusers.conf").read_text().splitlines()
        if line.strip() and not line.startswith("#")
    ]
    assert [f[:2] for f in sysusers] == [["u", user]]
    assert _one("Group") == user  # sysusers' "u" makes a group of the same name
    dirs = _tmpfiles_dirs()
    for path in (_one("WorkingDirectory"), *_one("ReadWritePaths").split()):
        assert dirs.get(path) == (user, user), path
    state = {f"/var/lib/{d}" for d in _all("StateDirectory")}
    cache = {f"/var/cache/{d}" for d in _all("CacheDirectory")}
    assert _one("WorkingDirectory") in state
    numba = dict(v.split("=", 1) for v in _all("Environment"))["NUMBA_CACHE_DIR"]
    assert any(numba.startswith(c + "/") for c in cache), numba


def test_the_example_config_s_log_dirs_are_writable_under_the_unit(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """ProtectSystem=strict leaves only ReadWritePaths writable: the shipped config's relative
    log.dirs, resolved from WorkingDirectory, and the example env file's must lie below one."""
    writable = [PurePosixPath(p) for p in _one("ReadWritePaths").split()]
    monkeypatch.chdir("/")  # relative log.dirs resolve against the cwd at load time
    shipped = load_config(config_file=REPO / "config" / "cleanerd.toml", env={})
    working = PurePosixPath(_one("WorkingDirectory"))
    example = _environment_file_example()["CLEANERD_LOG_DIRS"]
    for log_dir in (
        *(working / d.relative_to("/") for d in shipped.config.log_dirs),
        *(PurePosixPath(d) for d in example.split(",")),
    ):
        assert any(log_dir.is_relative_to(w) for w in writable), log_dir
        assert str(log_dir) in _tmpfiles_dirs(), log_dir


def test_the_example_environment_file_is_accepted_by_the_daemon() -> None:
    """Every CLEANERD_* line of the example, uncommented, is a setting with a valid value."""
    example = _environment_file_example()
    settings = {k: v for k, v in example.items() if k.startswith("CLEANERD_")}
    assert set(settings) <= set(ENV_NAMES), set(settings) - set(ENV_NAMES)
    loaded = load_config(config_file=REPO / "config" / "cleanerd.toml", env=settings)
    assert loaded.config.threads == int(settings["CLEANERD_LOG_CLEANER_THREADS"])
    # what ExecStart expands unquoted: a variable the daemon does not read as a setting
    expanded = {w[1:] for w in _exec("ExecStart") if w.startswith("$")}
    assert expanded <= set(example)
    assert not any(name.startswith("CLEANERD_") for name in expanded)


@pytest.mark.slow
def test_an_invalid_config_is_not_restarted_in_a_loop(tmp_path: Path) -> None:
    """RestartPreventExitStatus= names the code ``cleanerd run`` exits with on a bad config."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("CLEANERD_")}
    result = subprocess.run(
        [str(VENV_CLEANERD), "run", "--set", "log.cleaner.threads=-1"],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env=env,
        timeout=120,
        check=False,
    )
    assert "log.cleaner.threads" in result.stderr
    assert str(result.returncode) in _one("RestartPreventExitStatus").split()


@pytest.mark.slow
def test_a_damaged_pause_record_is_not_restarted_in_a_loop(tmp_path: Path) -> None:
    """The daemon refuses to start past a pause record it cannot read (it would clean what
    someone paused), with a code the unit does not restart on: only an operator can fix it."""
    (tmp_path / PAUSES_FILE).write_text('{"version": 1, "paused": "orders-3"}\n')
    env = {k: v for k, v in os.environ.items() if not k.startswith("CLEANERD_")}
    result = subprocess.run(
        [str(VENV_CLEANERD), "run", "--set", f"log.dirs={tmp_path}"],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env={**env, "CLEANERD_HTTP_LISTEN": "off"},
        timeout=120,
        check=False,
    )
    assert str(tmp_path / PAUSES_FILE) in result.stderr
    assert str(result.returncode) in _one("RestartPreventExitStatus").split()
