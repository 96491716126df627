"""The daemon's HTTP port over TLS: it serves the configured certificate at the address it
records as ``https``, and a SIGHUP after the certificate was renewed (new files written over
the old paths) serves the new one without a restart."""

from __future__ import annotations

import asyncio
import shutil
import ssl
from pathlib import Path

import pytest
import structlog

from cleanerd.config import load_config
from cleanerd.service import Daemon
from tests.support.polling import until
from tests.support.tls import self_signed


async def _served_certificate(port: int) -> bytes:
    """The DER certificate the port shows (not verified: the test compares it)."""
    context = ssl.create_default_context()
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    _, writer = await asyncio.open_connection("127.0.0.1", port, ssl=context)
    try:
        ssl_object = writer.get_extra_info("ssl_object")
        der = ssl_object.getpeercert(binary_form=True)
        assert der is not None
        return bytes(der)
    finally:
        writer.close()


def _der(pem: Path) -> bytes:
    return ssl.PEM_cert_to_DER_cert(pem.read_text())


@pytest.mark.asyncio
async def test_a_sighup_serves_a_renewed_certificate(tmp_path: Path) -> None:
    logdir = tmp_path / "logs"
    logdir.mkdir()
    cert, key = self_signed(tmp_path, "served")
    loaded = load_config(
        env={},
        overrides={
            "log.dirs": str(logdir),
            "cleanerd.http.listen": "127.0.0.1:0",
            "cleanerd.http.tls.cert.file": str(cert),
            "cleanerd.http.tls.key.file": str(key),
        },
    )
    daemon = Daemon(loaded, lambda: loaded)
    run = asyncio.create_task(daemon.run())
    try:
        url = await asyncio.wait_for(daemon.http_url(), 60)
        assert daemon.http is not None
        assert url == f"https://127.0.0.1:{daemon.http.port}"
        assert await _served_certificate(daemon.http.port) == _der(cert)
        renewed, renewed_key = self_signed(tmp_path, "renewed")
        shutil.copyfile(renewed, cert)
        shutil.copyfile(renewed_key, key)
        await until(lambda: daemon.ready)
        daemon.reload()
        assert await _served_certificate(daemon.http.port) == _der(renewed)
        key.write_text("not a key\n")  # a broken renewal: the loaded one keeps serving
        with structlog.testing.capture_logs() as logs:
            daemon.reload()
        assert await _served_certificate(daemon.http.port) == _der(renewed)
        assert [e["event"] for e in logs if e["log_level"] == "error"] == [
            "cannot reload the TLS certificate; serving the loaded one"
        ]
    finally:
        daemon.request_stop("test")
        assert await asyncio.wait_for(run, 60) == 0
