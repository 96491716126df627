"""``compact`` on damaged logs: it compacts to the model's survivors or refuses, touching nothing.

A seeded, bounded fuzz run (issue 9) over every codec, with and without transactions: each
mutant damages a generated log (batch headers, random bytes, cut or extended segments, index
files) and is judged by ``tests/support/fuzz_support.py``'s oracle: no traceback; exit 0 only
with the survivors ``expected_survivors`` gives for the undamaged log, and never when ``verify``
reports damage to data; exit 1 with every file byte-identical and the damaged file named.

``CLEANERD_FUZZ_MUTANTS`` (default 200, dealt over the ten base logs) and ``CLEANERD_FUZZ_SEED``
(default 9) bound and seed the run; a failure lists each mutant with the command that replays
it. ``bench/fuzz_compact.py`` runs the same mutants, and thousands more.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from cleanerd.format import HEADER_SIZE
from tests.support.fuzz_mutations import Mutant
from tests.support.fuzz_support import (
    CODECS,
    FAILURE,
    INDEX_REPAIRED,
    REFUSED,
    VARIANTS,
    BaseLog,
    Run,
    base_names,
    fuzz_one,
    judge,
    observe,
    schedule,
)

MUTANTS = int(os.environ.get("CLEANERD_FUZZ_MUTANTS", "200"))
SEED = int(os.environ.get("CLEANERD_FUZZ_SEED", "9"))


@pytest.fixture(scope="module")
def work() -> Iterator[Path]:
    """Scratch space on tmpfs when there is one: ``compact`` fsyncs every segment it writes,
    which on a loaded disk would be most of the run."""
    shm = Path("/dev/shm")
    parent = str(shm) if shm.is_dir() and os.access(shm, os.W_OK) else None
    root = Path(tempfile.mkdtemp(prefix="cleanerd-fuzz-", dir=parent))
    yield root
    shutil.rmtree(root, ignore_errors=True)


@pytest.fixture(scope="module")
def plain_none(work: Path) -> BaseLog:
    return BaseLog.build(work / "harness", "none", "plain", SEED)  # not the fuzz run's bases


@pytest.mark.slow
@pytest.mark.parametrize("codec", CODECS)
def test_every_mutant_compacts_or_is_refused_untouched(codec: str, work: Path) -> None:
    bases = {
        f"{codec}-{variant}": BaseLog.build(work / "bases", codec, variant, SEED)
        for variant in VARIANTS
    }
    mine = [(name, s) for name, s in schedule(SEED, MUTANTS, base_names()) if name in bases]
    failed = []
    for name, seed in mine:
        verdict = fuzz_one(bases[name], seed, work / "work")
        if verdict.outcome == FAILURE:
            replay = f"bench/fuzz_compact.py --seed {SEED} --replay {name}:{seed} --keep DIR"
            failed.append(f"{verdict.describe()}\n  replay: {replay}")
    assert not failed, f"{len(failed)} of {len(mine)} mutants failed:\n" + "\n".join(failed)


# --- the harness itself: reproducible, and its oracle able to fail ------------------------------
def test_a_mutant_is_a_pure_function_of_its_seed(plain_none: BaseLog) -> None:
    first, again = plain_none.mutant(1234), plain_none.mutant(1234)
    assert first == again
    assert first.changed
    others = {plain_none.mutant(s).changed for s in range(20)}
    assert len(others) >= 18  # seeds draw different damage (two may delete the same file)
    assert schedule(SEED, 30, base_names()) == schedule(SEED, 30, base_names())


def test_deleted_offset_index_is_rebuilt_and_compacted(plain_none: BaseLog, work: Path) -> None:
    name = next(n for n, data in plain_none.files.items() if n.endswith(".index") and data)
    mutant = Mutant(plain_none.name, 0, (f"{name}: deleted",), ((name, None),))
    verdict = judge(plain_none, mutant, observe(plain_none, mutant, work / "work"))
    assert verdict.outcome == INDEX_REPAIRED, verdict.describe()


def test_crc_covered_byte_is_refused_untouched(plain_none: BaseLog, work: Path) -> None:
    log = sorted(n for n in plain_none.batches if plain_none.batches[n])[1]
    pos = plain_none.batches[log][0][0]
    raw = bytearray(plain_none.files[log])
    raw[pos + HEADER_SIZE] ^= 0x80  # the first record's length: covered by the CRC
    mutant = Mutant(plain_none.name, 0, (f"{log}: flip",), ((log, bytes(raw)),))
    run = observe(plain_none, mutant, work / "work")
    verdict = judge(plain_none, mutant, run)
    assert verdict.outcome == REFUSED, verdict.describe()
    assert any(check == "crc" for _, check, _ in run.problems)


def _run(**facts: object) -> Run:
    defaults: dict[str, object] = {
        "exit_code": 1,
        "output": "error: fuzz-none-plain-0/0.log: bad (partition left as it was)",
        "error": None,
        "problems": [("x/00000000000000000000.log", "crc", "CRC mismatch")],
        "before": {"a": b"1"},
        "after": {"a": b"1"},
    }
    return Run(**{**defaults, **facts})  # type: ignore[arg-type]


def test_the_oracle_rejects_what_the_issue_forbids(plain_none: BaseLog) -> None:
    """Fed the facts of each forbidden result, the oracle calls it a failure (so a fuzz run
    that finds one cannot pass)."""
    log_mutant = Mutant(plain_none.name, 7, ("x.log: byte",), (("x.log", b""),))
    index_mutant = Mutant(plain_none.name, 8, ("x.index: deleted",), (("x.index", None),))
    wrong = dict(list(plain_none.expected.items())[1:])
    forbidden = [
        (log_mutant, _run()),  # the control: a clean refusal passes
        (log_mutant, _run(after={"a": b"2"})),  # refused but changed a file
        (log_mutant, _run(output="error: failed (partition left as it was)")),  # no file named
        (log_mutant, _run(output="error: fuzz-none-plain-0/0.log: bad")),  # "left as it was"?
        (log_mutant, _run(error="ValueError: boom")),  # a traceback
        (log_mutant, _run(exit_code=0, survivors=plain_none.expected)),  # silent partial
        (index_mutant, _run(problems=[])),  # index damage refused
        (index_mutant, _run(exit_code=0, problems=[], survivors=wrong)),  # a record lost
        (log_mutant, _run(exit_code=2)),  # usage error
    ]
    outcomes = [judge(plain_none, m, r).outcome for m, r in forbidden]
    assert outcomes == [REFUSED] + [FAILURE] * (len(forbidden) - 1)
    repaired = _run(exit_code=0, problems=[("x.index", "offset-index", "bad")])
    repaired.survivors = plain_none.expected
    assert judge(plain_none, index_mutant, repaired).outcome == INDEX_REPAIRED
    # after the clean only the active segment's indexes may still look wrong (never rewritten)
    repaired.after = {"p/00000000000000000000.log": b"", "p/00000000000000000100.log": b""}
    for name, outcome in (
        ("00000000000000000100", INDEX_REPAIRED),
        ("00000000000000000000", FAILURE),
    ):
        repaired.problems_after = [(f"p/{name}.timeindex", "time-index", "bad")]
        assert judge(plain_none, index_mutant, repaired).outcome == outcome
