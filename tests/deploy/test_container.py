"""The container image: the top-level Dockerfile built with buildah, then run as its own user.

No registry is reachable here, so the base is made by ``deploy/container/build-base.sh``
(debootstrap bookworm + Debian's python3.11) and passed as ``BASE_IMAGE``; the image is built
once for the module in a private buildah store (vfs, chroot isolation) that is removed at the end.
``buildah run`` runs commands as the ``cleanerd`` user; the read-only-root checks run the image's
entrypoint the way ``docker run --read-only`` does (root fs read-only, the volumes writable, the
cache volume a copy of the image's). Skipped, with the reason, only where buildah cannot run.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import signal
import socket
import ssl
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from cleanerd import __version__
from tests.support.tools import require

REPO = Path(__file__).resolve().parents[2]
BASE = "localhost/cleanerd-base:bookworm"
IMAGE = "localhost/cleanerd:test"
CACHE = "/var/cache/cleanerd/numba"
LOGS = "/var/lib/kafka"
UID = 10001

# The build (base ~2 min, image ~3 min on a quiet 2-core machine) runs in the first test's setup.
pytestmark = pytest.mark.timeout(1500)


@dataclass
class Image:
    """The built image: buildah's environment, a working container from it and its root fs."""

    env: dict[str, str]
    container: str
    rootfs: Path
    config: dict[str, Any]
    work: Path

    def buildah(self, *args: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
        return _run([require("buildah"), *args], env=self.env, timeout=timeout)

    def run(
        self, *argv: str, volumes: tuple[str, ...] = (), env: tuple[str, ...] = ()
    ) -> subprocess.CompletedProcess[str]:
        """``buildah run`` as the image's non-root user."""
        options = [a for v in volumes for a in ("-v", v)] + [a for e in env for a in ("-e", e)]
        return self.buildah(
            "run", "--isolation", "chroot", "--user", "cleanerd", *options, self.container,
            "--", *argv,
        )  # fmt: skip

    def read_only(self, argv: list[str], binds: dict[str, Path], env: dict[str, str]) -> list[str]:
        """argv that runs ``argv`` like ``docker run --read-only``: a private mount namespace,
        the image's root fs bound read-only, ``binds`` (container path -> host dir) writable,
        the image's user, environment and working dir."""
        script = [
            'root="$1"; shift',
            'mount --rbind "$root" "$root"',
            'mount -o remount,bind,ro "$root"',
        ]
        for target, source in binds.items():
            script.append(f'mount --bind "{source}" "$root{target}"')
        script += [
            'mount -t proc proc "$root/proc"',
            'mount -t tmpfs tmpfs "$root/tmp"',
            'mount --rbind /dev "$root/dev"',
            'exec chroot --userspec="$USERSPEC" "$root" "$@"',
        ]  # fmt: skip
        image_env = dict(e.split("=", 1) for e in self.config["Env"])
        variables = [f"{k}={v}" for k, v in {**image_env, **env}.items()]
        return [
            "unshare", "--mount", "--fork", "--kill-child",
            "env", f"USERSPEC={self.config['User']}",
            "sh", "-ec", "\n".join(script), "sh", str(self.rootfs),
            "/usr/bin/env", "-i", "-C", self.config["WorkingDir"], *variables, *argv,
        ]  # fmt: skip


def _run(
    argv: list[str], env: dict[str, str] | None = None, timeout: float = 300
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        argv, check=False, env=env, capture_output=True, text=True, timeout=timeout
    )


def _store(work: Path) -> tuple[dict[str, str] | None, str]:
    """buildah's environment with a private store in ``work``, or None and why buildah cannot
    run here at all. overlay where the kernel allows it (no full copy of the image per
    container), else vfs (plain copies, works everywhere)."""
    require("buildah")
    if os.geteuid() != 0:
        return None, "not root: debootstrap and buildah's chroot isolation need root"
    problems = []
    for driver in ("overlay", "vfs"):
        conf = work / f"storage-{driver}.conf"
        conf.write_text(
            f'[storage]\ndriver = "{driver}"\n'
            f'graphroot = "{work}/root"\nrunroot = "{work}/run"\n'
            # no bind mount of the store on itself that outlives buildah and blocks its removal
            '[storage.options.overlay]\nskip_mount_home = "true"\n'
        )
        env = {**os.environ, "CONTAINERS_STORAGE_CONF": str(conf)}
        probe = 'c=$(buildah from scratch) && buildah mount "$c" && buildah rm "$c"'
        try:
            result = _run(["sh", "-ec", probe], env=env, timeout=120)
        except subprocess.TimeoutExpired as e:
            problems.append(f"{driver}: {e}")
            continue
        if result.returncode == 0:
            return env, driver
        problems.append(f"{driver}: {result.stderr.strip()[-300:]}")
        _run([require("buildah"), "rm", "--all"], env=env)
        shutil.rmtree(work / "root", ignore_errors=True)
        shutil.rmtree(work / "run", ignore_errors=True)
    return None, "buildah cannot run a container here: " + "; ".join(problems)


def _ca_bundle() -> Path | None:
    """The CA bundle pip trusts here (a TLS-intercepting proxy's CA included), for the build."""
    for name in (os.environ.get("PIP_CERT"), os.environ.get("SSL_CERT_FILE")):
        if name and Path(name).is_file():
            return Path(name)
    default = ssl.get_default_verify_paths().cafile
    return Path(default) if default and Path(default).is_file() else None


def _checked(result: subprocess.CompletedProcess[str], what: str, log: Path | None = None) -> str:
    if result.returncode != 0:
        tail = log.read_text()[-4000:] if log else result.stderr[-4000:]
        pytest.fail(f"{what} failed (exit {result.returncode}):\n{tail}", pytrace=False)
    return result.stdout


@pytest.fixture(scope="module")
def image(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Image]:
    work = tmp_path_factory.mktemp("container")
    env, driver = _store(work)
    if env is None:
        print(f"test_container skipped: {driver}", file=sys.stderr)
        pytest.skip(driver)
    print(f"test_container: buildah store {driver} in {work}", file=sys.stderr)
    require("debootstrap")
    try:
        base_log = work / "base.log"
        with base_log.open("w") as out:
            made = subprocess.run(
                ["bash", str(REPO / "deploy/container/build-base.sh"), BASE],
                check=False, env=env, stdout=subprocess.PIPE, stderr=out, text=True, timeout=900,
            )  # fmt: skip
        _checked(made, "build-base.sh", base_log)
        ca = _ca_bundle()
        secret = ["--secret", f"id=pip-ca,src={ca}"] if ca else []
        build_log = work / "build.log"
        with build_log.open("w") as out:
            built = subprocess.run(
                [require("buildah"), "bud", "--format", "docker", "--isolation", "chroot",
                 "--pull=false",
                 *secret, "--build-arg", f"BASE_IMAGE={BASE}",
                 "--build-arg", f"IMAGE_VERSION={__version__}", "-t", IMAGE, str(REPO)],
                check=False, env=env, stdout=out, stderr=subprocess.STDOUT, text=True,
                timeout=1200,
            )  # fmt: skip
        _checked(built, "buildah bud", build_log)
        made_image = Image(env, "", Path(), {}, work)
        inspect = json.loads(
            _checked(made_image.buildah("inspect", "--type", "image", IMAGE), "inspect")
        )
        container = _checked(made_image.buildah("from", "--pull=false", IMAGE), "from").strip()
        rootfs = Path(_checked(made_image.buildah("mount", container), "mount").strip())
        yield Image(env, container, rootfs, inspect["Docker"]["config"], work)
    finally:
        for args in (["rm", "--all"], ["rmi", "--all", "--force"]):
            _run([require("buildah"), *args], env=env)
        for store in ("root", "run"):
            shutil.rmtree(work / store, ignore_errors=True)


def _tree(path: Path) -> dict[str, str]:
    """Every file under ``path`` with a hash of its bytes: numba writes here when it compiles."""
    return {
        str(p.relative_to(path)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(path.rglob("*"))
        if p.is_file()
    }


def _log_dir(tmp_path: Path) -> Path:
    """A generated two-partition log dir owned by the image's user."""
    logs = tmp_path / "logs"
    gen = [sys.executable, "-m", "cleanerd", "gen", "--partitions", "2", "--records", "4000"]
    _checked(_run([*gen, "--keys", "200", str(logs)]), "gen")
    for p in [logs, *logs.rglob("*")]:
        os.chown(p, UID, UID)
    return logs


def _compacted(stdout: str, logs: Path) -> int:
    """Check compact's JSON and the logs it left; the kernels it compiled (numba's own count)."""
    rows = [json.loads(line) for line in stdout.splitlines() if line.startswith("{")]
    assert sorted(r["partition"] for r in rows) == ["demo-0", "demo-1"]
    assert all(r["records_in"] == 4000 and 0 < r["records_out"] <= 200 for r in rows)
    verify = [sys.executable, "-m", "cleanerd", "verify", str(logs)]
    _checked(_run(verify), "verify of the compacted logs")
    return sum(int(r["kernels_compiled"]) for r in rows)


def test_image_settings(image: Image) -> None:
    c = image.config
    assert c["User"] == f"{UID}:{UID}"
    assert c["Entrypoint"] == ["cleanerd"]
    assert c["Cmd"] == ["run", "--config", "/etc/cleanerd/cleanerd.toml"]
    assert set(c["Volumes"]) == {LOGS, "/etc/cleanerd", CACHE}
    assert set(c["ExposedPorts"]) == {"9404/tcp"}
    assert c["StopSignal"] == "SIGTERM"
    assert f"NUMBA_CACHE_DIR={CACHE}" in c["Env"]
    assert c["Healthcheck"]["Test"][:2] == ["CMD", "python3"]
    assert "127.0.0.1:9404/readyz" in c["Healthcheck"]["Test"][-1]
    labels = c["Labels"]
    assert labels["org.opencontainers.image.version"] == __version__
    assert labels["org.opencontainers.image.licenses"] == "Apache-2.0"
    assert labels["org.opencontainers.image.base.name"] == BASE


def test_the_build_prints_no_warning_about_the_user(image: Image) -> None:
    """The image's user is made without a warning in the build log (useradd warned about a
    fixed UID outside the system range), and is what the volume docs say: 10001, no home."""
    log = (image.work / "build.log").read_text()
    # the tools' own messages start with their name (buildah's step echo starts "STEP")
    said = [line for line in log.splitlines() if line.startswith(("useradd", "groupadd"))]
    assert said == []
    passwd = (image.rootfs / "etc/passwd").read_text().splitlines()
    assert "cleanerd:x:10001:10001::/nonexistent:/usr/sbin/nologin" in passwd


def test_final_stage_has_wheels_installed_and_no_build_tools(image: Image) -> None:
    root = image.rootfs
    assert (root / "opt/cleanerd/bin/cleanerd").is_file()
    assert not (root / "wheels").exists()
    assert not (root / "opt/build").exists()  # the builder's venv
    assert not [p for p in ("gcc", "cc", "g++", "make") if (root / "usr/bin" / p).exists()]


def test_version_as_the_cleanerd_user(image: Image) -> None:
    out = _checked(image.run("sh", "-c", "id -u; id -g; cleanerd --version"), "cleanerd --version")
    assert out.split("\n", 2) == [str(UID), str(UID), f"cleanerd, version {__version__}\n"]


def test_config_check_of_the_shipped_config(image: Image) -> None:
    result = image.run("cleanerd", "config", "check", "--config", "/etc/cleanerd/cleanerd.toml")
    assert _checked(result, "config check").strip() == "config ok"
    assert "log dir" not in result.stderr  # /var/lib/kafka exists and the user may write it
    assert "0.0.0.0:9404" in result.stderr  # the reachable port without a token is said


def test_compact_loads_every_kernel_from_the_warmed_cache(image: Image, tmp_path: Path) -> None:
    logs = _log_dir(tmp_path)
    cache = image.rootfs / CACHE.lstrip("/")
    before = _tree(cache)
    assert before, "the build left the kernel cache empty"
    result = image.run(
        "cleanerd", "compact", "--format", "json", "--roll-active", LOGS,
        volumes=(f"{logs}:{LOGS}",),
    )  # fmt: skip
    assert _compacted(_checked(result, "compact"), logs) == 0
    # the cache dir is writable by the user: a kernel compiled now would have been saved there
    assert _tree(cache) == before


def test_a_compile_would_change_the_cache(image: Image, tmp_path: Path) -> None:
    """The same compact with an empty cache dir compiles, says so, and fills the dir: the
    checks above can fail, and compact's kernels are cached ones."""
    logs = _log_dir(tmp_path)
    cold = tmp_path / "cold"
    cold.mkdir()
    for owned in (tmp_path, cold):
        os.chown(owned, UID, UID)
    # one bind mount: buildah 1.28's chroot isolation loses the logs when two are given
    result = image.run(
        "cleanerd", "compact", "--format", "json", "--roll-active", "/var/tmp/t/logs",
        volumes=(f"{tmp_path}:/var/tmp/t",), env=("NUMBA_CACHE_DIR=/var/tmp/t/cold",),
    )  # fmt: skip
    assert _compacted(_checked(result, "compact with an empty cache"), logs) > 0
    assert [name for name in _tree(cold) if name.endswith(".nbi")]


def test_warmup_in_the_image_compiles_nothing(image: Image) -> None:
    report = json.loads(_checked(image.run("cleanerd", "warmup", "--format", "json"), "warmup"))
    assert report["cache_dir"] == CACHE
    assert (report["kernels_compiled"], report["compiled"]) == (0, [])
    assert report["kernels_loaded_from_cache"] > 0


@pytest.fixture
def cache_volume(image: Image, tmp_path: Path) -> Path:
    """What docker makes of the cache volume: a copy of the image's dir, owner kept."""
    copy = tmp_path / "cache"
    shutil.copytree(image.rootfs / CACHE.lstrip("/"), copy, symlinks=True)
    for p in [copy, *copy.rglob("*")]:
        os.chown(p, UID, UID)
    return copy


def test_read_only_root(image: Image, tmp_path: Path, cache_volume: Path) -> None:
    logs = _log_dir(tmp_path)
    binds = {CACHE: cache_volume, LOGS: logs}
    probe = image.read_only(["sh", "-c", "touch /etc/cleanerd/probe"], binds, {})
    refused = _run(probe, timeout=60)
    assert refused.returncode != 0
    assert "Read-only file system" in refused.stderr
    before = _tree(cache_volume)
    compact = ["compact", "--format", "json", "--roll-active", LOGS]  # docker run IMAGE compact
    argv = image.read_only([*image.config["Entrypoint"], *compact], binds, {})
    result = _run(argv)
    assert _compacted(_checked(result, "compact on a read-only root"), logs) == 0
    assert _tree(cache_volume) == before


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def _child(pid: int) -> int:
    """The process ``unshare --fork`` started (the chroot'd command, after its execs)."""
    children = Path(f"/proc/{pid}/task/{pid}/children").read_text().split()
    assert len(children) == 1, children
    return int(children[0])


def test_daemon_from_the_image_s_command_is_healthy_and_stops_on_sigterm(
    image: Image, tmp_path: Path, cache_volume: Path
) -> None:
    """ENTRYPOINT + CMD on a read-only root, port moved off 9404 (the machine is shared); the
    HEALTHCHECK's own command passes against it; SIGTERM stops it with exit 0."""
    logs = _log_dir(tmp_path)
    port = _free_port()
    binds = {CACHE: cache_volume, LOGS: logs}
    listen = {"CLEANERD_HTTP_LISTEN": f"127.0.0.1:{port}"}
    command = image.read_only([*image.config["Entrypoint"], *image.config["Cmd"]], binds, listen)
    check = [a.replace(":9404/", f":{port}/") for a in image.config["Healthcheck"]["Test"][1:]]
    daemon = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 120  # the HEALTHCHECK's start period, doubled
        healthy = None
        while daemon.poll() is None and time.monotonic() < deadline:
            healthy = _run(image.read_only(check, binds, {}), timeout=60)
            if healthy.returncode == 0:
                break
            time.sleep(1)
        assert daemon.poll() is None, daemon.communicate()[1][-3000:]
        assert healthy is not None
        assert healthy.returncode == 0, healthy.stderr[-2000:]
        os.kill(_child(daemon.pid), signal.SIGTERM)
        _, stderr = daemon.communicate(timeout=90)
    finally:
        if daemon.poll() is None:
            daemon.kill()
            daemon.communicate()
    assert daemon.returncode == 0, stderr[-3000:]
    events = [json.loads(line) for line in stderr.splitlines() if line.startswith("{")]
    assert events, stderr[-2000:]  # the shipped config logs JSON lines
