"""The Dockerfile read as text, no image built (``test_container.py`` builds and runs one): its
health check asks for readiness, on the port the shipped config listens on and the image
exposes."""

from __future__ import annotations

import json
import re
import tomllib
from pathlib import Path

from cleanerd.config import parse_listen

REPO = Path(__file__).resolve().parents[2]
DOCKERFILE = REPO / "Dockerfile"
SHIPPED = REPO / "deploy" / "container" / "cleanerd.toml"


def _instruction(name: str) -> str:
    """The one instruction ``name`` with its continuation lines joined."""
    text = DOCKERFILE.read_text().replace("\\\n", " ")
    found = re.findall(rf"^{name}\s+(.*)$", text, re.MULTILINE)
    assert len(found) == 1, found
    return str(found[0])


def test_the_health_check_asks_readyz_on_the_shipped_port() -> None:
    healthcheck = _instruction("HEALTHCHECK")
    command = json.loads(healthcheck.split("CMD", 1)[1])
    assert command[:2] == ["python3", "-c"]
    urls = re.findall(r"'(http://[^']+)'", command[2])
    _, port = parse_listen(tomllib.loads(SHIPPED.read_text())["cleanerd"]["http"]["listen"])
    assert urls == [f"http://127.0.0.1:{port}/readyz"]
    assert _instruction("EXPOSE") == f"{port}/tcp"
