"""Valid settings that are still likely mistakes: said by ``config check`` and at daemon start.

A config can pass validation and yet not work (``log.dirs`` naming a dir that does not exist,
which only ``cleanerd run`` would find) or work unsafely (the HTTP port open to the network with
no admin token, or its token sent in clear). These are warnings, not errors: the config is
valid, the operator decides.
"""

from __future__ import annotations

import ipaddress
import os
from pathlib import Path

from cleanerd.config._settings import CleanerdConfig
from cleanerd.config._sources import join_listen

LOOPBACK_NAMES = frozenset({"localhost", "localhost.localdomain", "ip6-localhost"})


def is_loopback_host(host: str) -> bool:
    """True for a loopback address or name (``::ffff:127.0.0.1`` too, as a dual-stack socket
    reports an IPv4 peer); an unspecified address (``0.0.0.0``, ``::``, empty: every interface)
    and any other name count as reachable from the network."""
    name = host.strip().strip("[]").split("%", 1)[0]  # an IPv6 zone id is not the address
    if name.lower() in LOOPBACK_NAMES:
        return True
    try:
        address = ipaddress.ip_address(name)
    except ValueError:
        return False
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        address = address.ipv4_mapped
    return address.is_loopback


def exposure_warning(config: CleanerdConfig) -> str | None:
    """The warning for an HTTP port reachable from the network without an admin token."""
    host = config.http_host
    if host is None or config.admin_token or is_loopback_host(host):
        return None
    shown = "every interface" if host.strip("[]") in ("", "0.0.0.0", "::") else host
    status = (
        "/status is readable by anyone who can connect (cleanerd.http.status.public = true)"
        if config.status_public
        else "/status and admin actions answer loopback clients only"
    )
    return (
        f"cleanerd.http.listen = {join_listen(host, config.http_port)} listens on {shown} with no "
        f"cleanerd.admin.token: {status}; /metrics and /healthz are open to all; "
        "set a token or listen on 127.0.0.1"
    )


def cleartext_token_warning(config: CleanerdConfig) -> str | None:
    """The warning for an admin token sent over plain HTTP from beyond loopback: every request
    that carries it shows it to whoever is on the path, who can then pause, resume and clean."""
    host = config.http_host
    if host is None or not config.admin_token or is_loopback_host(host):
        return None
    if config.tls_cert_file is not None:
        return None
    return (
        f"cleanerd.http.listen = {join_listen(host, config.http_port)} serves plain HTTP beyond "
        "loopback with a cleanerd.admin.token: the token crosses the network in clear with "
        "every request that carries it; set cleanerd.http.tls.cert.file and "
        "cleanerd.http.tls.key.file, or listen on 127.0.0.1"
    )


def http_warnings(config: CleanerdConfig) -> list[str]:
    """Every warning about the HTTP port: open without a token, or a token sent in clear."""
    found = (exposure_warning(config), cleartext_token_warning(config))
    return [w for w in found if w is not None]


def log_dir_problem(path: Path) -> str | None:
    """Why ``path`` cannot be a log dir (missing, not a directory, not accessible), or None."""
    try:
        if not path.exists():
            return f"log dir {path} does not exist"
        if not path.is_dir():
            return f"log dir {path} is not a directory"
    except OSError as e:  # a parent we may not search
        return f"log dir {path}: cannot access: {e.strerror or e}"
    if not os.access(path, os.R_OK | os.W_OK | os.X_OK):
        return f"log dir {path}: no read, write and search permission for this user"
    return None


def config_warnings(config: CleanerdConfig, log_dirs_source: str = "default") -> list[str]:
    """Every warning for ``config``: log dirs that cannot be used, the HTTP port's."""
    found = [
        f"{problem} (log.dirs from {log_dirs_source}); cleanerd run would refuse to start"
        for path in config.log_dirs
        if (problem := log_dir_problem(path)) is not None
    ]
    return found + http_warnings(config)
