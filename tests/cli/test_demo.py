"""``cleanerd demo`` refuses an address it cannot listen on before it writes anything."""

from __future__ import annotations

import socket
from pathlib import Path

from click.testing import CliRunner

from cleanerd.cli import cli


def test_a_taken_port_is_refused_before_the_demo_dir_is_made(tmp_path: Path) -> None:
    directory = tmp_path / "demo"
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        result = CliRunner().invoke(
            cli, ["demo", str(directory), "--duration", "1", "--listen", f"127.0.0.1:{port}"]
        )
    assert result.exit_code == 1, result.output
    assert f"error: cannot listen on 127.0.0.1:{port}: Address already in use" in result.output
    assert "127.0.0.1:0 takes a free port" in result.output
    assert "demo running" not in result.output
    assert not directory.exists()  # nothing written, nothing to clean up


def test_a_malformed_address_is_refused_naming_the_option(tmp_path: Path) -> None:
    result = CliRunner().invoke(cli, ["demo", str(tmp_path / "d"), "--listen", "localhost"])
    assert result.exit_code == 1
    assert "--listen localhost: must be host:port" in result.output
    assert not (tmp_path / "d").exists()
