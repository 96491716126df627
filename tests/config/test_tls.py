"""TLS of the HTTP port as the config builds it: the settings checked by loading the files,
and the trust ``cleanerd ctl`` gives the daemon (its own certificate pinned, or ``--cacert``),
tried with real handshakes against a local TLS server."""

from __future__ import annotations

import asyncio
import ssl
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import pytest

from cleanerd.config import ConfigError, client_context, load_config
from cleanerd.config._tls import server_context
from tests.support.tls import issued, self_signed

CERT, KEY = "cleanerd.http.tls.cert.file", "cleanerd.http.tls.key.file"


def _problems(**settings: str) -> dict[str, str]:
    """setting -> rule of each problem the config check finds with ``settings``."""
    with pytest.raises(ConfigError) as caught:
        load_config(env={}, overrides=settings)
    return {p.setting: p.rule for p in caught.value.problems}


def test_tls_is_off_by_default() -> None:
    c = load_config(env={}).config
    assert (c.tls_cert_file, c.tls_key_file, c.http_scheme) == (None, None, "http")
    assert c.server_tls() is None


def test_a_matching_pair_turns_https_on(tmp_path: Path) -> None:
    cert, key = self_signed(tmp_path)
    c = load_config(env={}, overrides={CERT: str(cert), KEY: str(key)}).config
    assert c.http_scheme == "https"
    assert isinstance(c.server_tls(), ssl.SSLContext)


def test_relative_paths_resolve_against_the_working_dir(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    self_signed(tmp_path)
    monkeypatch.chdir(tmp_path)
    c = load_config(env={}, overrides={CERT: "server.crt", KEY: "server.key"}).config
    assert c.tls_cert_file == tmp_path / "server.crt"


def test_one_without_the_other_names_the_missing_setting(tmp_path: Path) -> None:
    cert, key = self_signed(tmp_path)
    assert _problems(**{CERT: str(cert)}) == {KEY: f"must be set too when {CERT} is"}
    assert _problems(**{KEY: str(key)}) == {KEY: f"needs {CERT} too"}


def test_a_missing_or_bad_file_is_a_problem_of_its_setting(tmp_path: Path) -> None:
    cert, key = self_signed(tmp_path)
    missing = _problems(**{CERT: str(tmp_path / "nope.crt"), KEY: str(key)})
    assert list(missing) == [CERT]
    assert missing[CERT].startswith("cannot read")
    not_pem = tmp_path / "not.pem"
    not_pem.write_text("hello\n")
    assert list(_problems(**{CERT: str(not_pem), KEY: str(key)})) == [CERT]
    _, other_key = self_signed(tmp_path, "other")
    wrong = _problems(**{CERT: str(cert), KEY: str(other_key)})
    assert list(wrong) == [KEY]  # the key of another certificate
    assert "not usable" in wrong[KEY]
    assert str(cert) in wrong[KEY]


@asynccontextmanager
async def _tls_server(cert: Path, key: Path) -> AsyncIterator[int]:
    """A TLS server on 127.0.0.1 that answers ``ok`` to any line; yields its port."""

    async def answer(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            await reader.readline()
            writer.write(b"ok\n")
            await writer.drain()
        except (ssl.SSLError, ConnectionError):
            pass  # a client that refused our certificate
        finally:
            writer.close()

    server = await asyncio.start_server(answer, "127.0.0.1", 0, ssl=server_context(cert, key))
    async with server:
        yield server.sockets[0].getsockname()[1]


async def _ask(port: int, context: ssl.SSLContext, server_hostname: str | None = None) -> bytes:
    reader, writer = await asyncio.open_connection(
        "127.0.0.1", port, ssl=context, server_hostname=server_hostname
    )
    try:
        writer.write(b"hello\n")
        return await reader.readline()
    finally:
        writer.close()


@pytest.mark.asyncio
async def test_the_pinned_certificate_is_trusted_whatever_name_it_was_issued_for(
    tmp_path: Path,
) -> None:
    cert, key = self_signed(tmp_path, hosts=("cleanerd.example",))  # not 127.0.0.1
    async with _tls_server(cert, key) as port:
        assert await _ask(port, client_context(pinned=cert)) == b"ok\n"
        other, _ = self_signed(tmp_path, "other")
        with pytest.raises(ssl.SSLCertVerificationError):
            await _ask(port, client_context(pinned=other))
        with pytest.raises(ssl.SSLCertVerificationError):  # the system CAs do not know it
            await _ask(port, client_context())


@pytest.mark.asyncio
async def test_a_pinned_leaf_that_a_ca_issued_is_trusted_alone(tmp_path: Path) -> None:
    """A leaf whose issuer ctl does not know is trusted by the pin; the pin is the file's
    first certificate alone, so a CA certificate after it trusts nothing it issued."""
    _, cert, key = issued(tmp_path, "one")
    async with _tls_server(cert, key) as port:
        assert await _ask(port, client_context(pinned=cert)) == b"ok\n"
    sibling_ca, sibling, sibling_key = issued(tmp_path, "two")
    chain = tmp_path / "chain.pem"
    # a cert file holding more than the daemon's leaf: only its first certificate is trusted,
    # even when a later one issued the certificate the server shows
    chain.write_bytes(cert.read_bytes() + sibling_ca.read_bytes())
    async with _tls_server(sibling, sibling_key) as port:
        with pytest.raises(ssl.SSLCertVerificationError):
            await _ask(port, client_context(pinned=chain))


@pytest.mark.asyncio
async def test_cacert_checks_the_chain_and_the_host_name(tmp_path: Path) -> None:
    ca, cert, key = issued(tmp_path, hosts=("localhost", "127.0.0.1"))
    async with _tls_server(cert, key) as port:
        assert await _ask(port, client_context(cacert=ca)) == b"ok\n"
        context = client_context(cacert=ca)
        # the right CA, but the certificate does not name this host
        with pytest.raises(ssl.SSLCertVerificationError, match="match"):
            await _ask(port, context, "elsewhere.example")
