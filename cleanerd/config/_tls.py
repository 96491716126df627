"""TLS on the daemon's HTTP port: the server's context from its two settings, and the trust
``cleanerd ctl`` gives the daemon it talks to.

The daemon serves ``cleanerd.http.tls.cert.file`` (PEM: the certificate, then any intermediates)
with ``cleanerd.http.tls.key.file``. The config check loads both exactly as the daemon will, so a
missing file, a key that does not match or a file that is not PEM is a configuration error
naming the setting, not a failure at bind time.

``ctl`` reads the same config as ``run``, so by default it trusts the daemon's own certificate,
the first of the cert file, and nothing else: a pin. The name it was issued for is then not
checked (the address and the certificate come from the same config, and only the holder of that
certificate's key can complete the handshake), so a certificate for a DNS name serves ctl on
``127.0.0.1`` too. With ``--cacert`` ctl verifies as any client does: a chain to those CAs, and
the URL's host named in the certificate.
"""

from __future__ import annotations

import re
import ssl
from pathlib import Path

MIN_VERSION = ssl.TLSVersion.TLSv1_2
_PEM_CERT = re.compile(rb"-----BEGIN CERTIFICATE-----.+?-----END CERTIFICATE-----", re.DOTALL)


class TlsError(ValueError):
    """A certificate or key file that cannot serve; the message says why, not which setting."""


def _why(e: Exception) -> str:
    if isinstance(e, OSError) and not isinstance(e, ssl.SSLError):
        return f"cannot read: {e.strerror or e}"
    reason = getattr(e, "reason", None)
    return f"not usable: {reason or e}"


def check_cert_file(path: Path) -> None:
    """``path`` holds at least one PEM certificate (TlsError otherwise)."""
    try:
        ssl.create_default_context().load_verify_locations(cafile=str(path))
    except (OSError, ValueError) as e:
        raise TlsError(_why(e)) from None


def server_context(cert: Path, key: Path) -> ssl.SSLContext:
    """The daemon's server context: TLS 1.2 or later, the certificate chain and its key."""
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.minimum_version = MIN_VERSION
    load_chain(context, cert, key)
    return context


def load_chain(context: ssl.SSLContext, cert: Path, key: Path) -> None:
    """Load (or load again, after a renewal: new handshakes use it) the chain and its key."""
    try:
        context.load_cert_chain(str(cert), str(key))
    except (OSError, ValueError) as e:
        raise TlsError(_why(e)) from None


def client_context(cacert: Path | None = None, pinned: Path | None = None) -> ssl.SSLContext:
    """ctl's context: ``cacert``'s CAs with the host checked; else ``pinned``'s first
    certificate alone, host not checked (see the module doc); else the system's CAs."""
    if cacert is not None:
        context = ssl.create_default_context(cafile=str(cacert))
    elif pinned is not None:
        context = ssl.create_default_context(cadata=_first_certificate(pinned))
        context.check_hostname = False  # the certificate itself is what is trusted
        # the daemon's own certificate as a trust anchor, whoever issued it
        context.verify_flags |= ssl.VERIFY_X509_PARTIAL_CHAIN
    else:
        context = ssl.create_default_context()
    context.minimum_version = MIN_VERSION
    return context


def _first_certificate(path: Path) -> str:
    try:
        found = _PEM_CERT.search(path.read_bytes())
    except OSError as e:
        raise TlsError(f"{path}: {_why(e)}") from None
    if found is None:
        raise TlsError(f"{path}: no PEM certificate in it")
    return found.group().decode("ascii")
