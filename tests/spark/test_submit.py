"""``cleanerd spark compact`` runs under ``spark-submit`` too, with ``cleanerd compact``'s result.

The issue's promise for clusters, where jobs are launched by ``spark-submit`` (its own
``--master``, resources and Python), not by the ``cleanerd`` command: the module file is the
application, and the partition dir it leaves is byte-identical to ``cleanerd compact``'s.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import cleanerd.cli.spark_cmd as spark_cmd
from cleanerd.storage import LEDGER_FILE
from tests.support.logs import ledger_counts

pytest.importorskip("pyspark", reason="the spark extra is part of the test install")

NOW = 1_800_000_000_000
SPARK_SUBMIT = Path(sys.executable).parent / "spark-submit"


def _cleanerd(*args: str) -> subprocess.CompletedProcess[str]:
    cmd = [sys.executable, "-m", "cleanerd", *args]
    return subprocess.run(cmd, check=True, capture_output=True, text=True)


def _files(directory: Path) -> dict[str, bytes]:
    """The files' bytes, but the erasure ledger's (its time and engine differ by design)."""
    return {
        p.name: p.read_bytes()
        for p in sorted(directory.iterdir())
        if p.is_file() and p.name != LEDGER_FILE
    }


@pytest.mark.skipif(not SPARK_SUBMIT.exists(), reason="pyspark installs bin/spark-submit")
def test_spark_submit_compacts_like_cleanerd_compact(tmp_path: Path) -> None:
    logs, reference = tmp_path / "logs", tmp_path / "reference"
    _cleanerd("gen", str(logs), "--topic", "t", "--records", "5000", "--keys", "300",
              "--segment-bytes", "100000", "--codec", "lz4")  # fmt: skip
    shutil.copytree(logs, reference)
    _cleanerd("compact", str(reference), "--now", str(NOW))
    env = {**os.environ, "PYSPARK_PYTHON": sys.executable}  # spark-submit's Python otherwise
    args = [str(SPARK_SUBMIT), "--master", "local[2]", spark_cmd.__file__, "compact", str(logs)]
    args += ["--now", str(NOW), "--format", "json"]
    result = subprocess.run(args, capture_output=True, text=True, env=env, timeout=600, check=False)
    assert result.returncode == 0, result.stderr[-3000:]
    # spark-submit merges the application's stderr into its stdout: the JSON lines are the
    # ones that parse
    lines = [line for line in result.stdout.splitlines() if line.startswith("{")]
    (summary,) = [json.loads(line) for line in lines]
    assert (summary["partition"], summary["records_in"]) == ("t-0", 5000)
    assert summary["records_out"] < 5000 // 5
    assert _files(logs / "t-0") == _files(reference / "t-0")
    assert _files(logs) == _files(reference)  # the log dir's checkpoints too
    assert ledger_counts(logs) == ledger_counts(reference)
