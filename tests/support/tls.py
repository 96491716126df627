"""Certificates for the TLS tests, made by the ``openssl`` command in the test's own dir: a
self-signed one, and a small CA with a leaf it issued (a leaf that is not its own anchor)."""

from __future__ import annotations

import ipaddress
import subprocess
from pathlib import Path

from tests.support.tools import require

HOSTS = ("localhost", "127.0.0.1")


def _san(hosts: tuple[str, ...]) -> str:
    names = []
    for host in hosts:
        try:
            ipaddress.ip_address(host)
        except ValueError:
            names.append(f"DNS:{host}")
        else:
            names.append(f"IP:{host}")
    return "subjectAltName=" + ",".join(names)


def _openssl(*args: str | Path) -> None:
    subprocess.run(
        [require("openssl"), *map(str, args)], check=True, capture_output=True, timeout=60
    )


def _key_options() -> list[str]:
    return ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes"]


def self_signed(
    directory: Path, name: str = "server", hosts: tuple[str, ...] = HOSTS
) -> tuple[Path, Path]:
    """(certificate, key) PEM files of a self-signed certificate naming ``hosts`` (none: a CA's)."""
    cert, key = directory / f"{name}.crt", directory / f"{name}.key"
    names = ["-addext", _san(hosts)] if hosts else []
    _openssl(
        "req", "-x509", *_key_options(), "-keyout", key, "-out", cert, "-days", "2",
        "-subj", f"/CN={name}", *names,
    )  # fmt: skip
    return cert, key


def issued(
    directory: Path, name: str = "leaf", hosts: tuple[str, ...] = HOSTS
) -> tuple[Path, Path, Path]:
    """(CA certificate, leaf certificate, leaf key): a CA, then a leaf for ``hosts`` it signed."""
    ca_cert, ca_key = self_signed(directory, f"{name}-ca", ())
    csr, cert, key = (directory / f"{name}.{ext}" for ext in ("csr", "crt", "key"))
    _openssl("req", "-new", *_key_options(), "-keyout", key, "-out", csr, "-subj", f"/CN={name}")
    extensions = directory / f"{name}.ext"
    extensions.write_text(_san(hosts) + "\n")
    _openssl(
        "x509", "-req", "-in", csr, "-CA", ca_cert, "-CAkey", ca_key, "-CAcreateserial",
        "-out", cert, "-days", "2", "-extfile", extensions,
    )  # fmt: skip
    return ca_cert, cert, key
