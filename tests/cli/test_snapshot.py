"""``cleanerd snapshot``: create, list, show, load and delete on a generated log dir."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from cleanerd.cli._snapshot import snapshot_group


def _gen(logdir: Path) -> Path:
    subprocess.run(
        [sys.executable, "-m", "cleanerd", "gen", str(logdir), "--topic", "orders",
         "--records", "3000", "--keys", "200", "--segment-bytes", "40000",
         "--transactional-producers", "2", "--abort-ratio", "0.5", "--codec", "lz4"],
        check=True, capture_output=True,
    )  # fmt: skip
    return logdir / "orders-0"


def _run(*args: str) -> str:
    result = CliRunner().invoke(snapshot_group, list(args), catch_exceptions=False)
    assert result.exit_code == 0, result.output
    return result.output


@pytest.mark.slow
def test_create_list_show_load_delete(tmp_path: Path) -> None:
    part = _gen(tmp_path)
    made = json.loads(_run("create", "--format", "json", str(part)))
    assert made["skipped"] is None
    assert made["records"] > 0
    path = Path(made["path"])
    assert path.parent == part / "checkpoints"

    (listed,) = [
        json.loads(line) for line in _run("list", "--format", "json", str(part)).splitlines()
    ]
    assert listed["valid"] is True
    assert listed["records"] == made["records"]
    shown = _run("show", "--format", "json", str(path)).splitlines()
    assert len(shown) == made["records"]

    # the state a reader loads is the snapshot's records (no log after it yet)
    loaded = [json.loads(x) for x in _run("load", str(part)).splitlines()]
    assert sorted(r["key"] for r in loaded) == sorted(json.loads(x)["key"] for x in shown)
    again = json.loads(_run("create", "--format", "json", str(part)))
    assert again["skipped"] == f"the newest snapshot already ends at {made['end_offset']}"

    # a damaged snapshot is listed as invalid and load falls back to the log, with a warning
    data = bytearray(path.read_bytes())
    data[100] ^= 0x01
    path.write_bytes(bytes(data))
    listed = json.loads(_run("list", "--format", "json", str(part)))
    assert listed["valid"] is False
    assert "CRC" in listed["problem"] or "crc" in listed["problem"]
    result = CliRunner().invoke(snapshot_group, ["load", "--count", str(part)])
    assert result.exit_code == 0
    assert f"{path}" in result.output  # the warning names the file (stderr is mixed in)
    assert f"orders-0: {len(loaded)} live keys" in result.output

    # verify reports the damaged snapshot as a problem naming the file (and exits 1)
    checked = subprocess.run(
        [sys.executable, "-m", "cleanerd", "verify", str(part)],
        check=False,
        capture_output=True,
        text=True,
    )
    assert checked.returncode == 1
    assert f"{path}" in checked.stdout + checked.stderr

    _run("delete", str(path))
    assert list((part / "checkpoints").iterdir()) == []
    ok = subprocess.run(
        [sys.executable, "-m", "cleanerd", "verify", str(part)], check=False, capture_output=True
    )
    assert ok.returncode == 0
