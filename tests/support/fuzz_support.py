"""Corrupt-log fuzzing of ``cleanerd compact``: base logs, seeded mutants, and the oracle.

Shared by ``tests/compaction/test_compact_fuzz.py`` (a bounded run in CI) and
``bench/fuzz_compact.py`` (many more mutants), so both judge a mutant the same way. A mutant is
fully determined by its base log (codec, variant and the run seed) and its own seed, so any
failure replays exactly.

The oracle (issue 9): ``compact`` never raises a traceback; exit 0 means the survivors are the
model's (``expected_survivors`` on the undamaged log), which is only possible when ``verify``
found nothing wrong with the mutant's data (index damage is repaired, not lost); exit 1 means
every file of the log dir is byte-identical to before and the message names a file.
"""

from __future__ import annotations

import hashlib
import random
import re
import shutil
import traceback
from dataclasses import dataclass, field
from pathlib import Path

from click.testing import CliRunner

from cleanerd.cli import cli
from cleanerd.format import kernels as k, scan_batches
from cleanerd.inspect import verify_path
from cleanerd.storage import INDEX_SUFFIX, TIME_INDEX_SUFFIX, TXN_INDEX_SUFFIX, PartitionLog
from cleanerd.workload import WorkloadSpec, expected_survivors, generate
from tests.support.fuzz_mutations import Mutant, make_mutant

CODECS = ("none", "gzip", "snappy", "lz4", "zstd")
VARIANTS = ("plain", "txn")
INDEX_SUFFIXES = (INDEX_SUFFIX, TIME_INDEX_SUFFIX, TXN_INDEX_SUFFIX)
COMPACT_ARGS = ("--delete-retention-ms", "0", "--now", "9999999999999", "--format", "json")

COMPACTED = "compacted"  # data touched, verify saw nothing wrong, compact kept the survivors
INDEX_REPAIRED = "index-repaired"  # only index files touched; compacted to the survivors
REFUSED = "refused"  # exit 1, nothing changed, a file named
FAILURE = "failure"
OUTCOMES = (COMPACTED, INDEX_REPAIRED, REFUSED, FAILURE)

Survivors = dict[bytes, tuple[int, str]]  # key -> (offset, sha256 of the value)
Snapshot = dict[str, bytes]  # path relative to the log dir -> content


def base_spec(codec: str, variant: str, seed: int) -> WorkloadSpec:
    """A small log of several segments; the sizes are drawn from the seed (issue 9's ranges)."""
    rng = random.Random(f"{seed}:{codec}:{variant}")
    txn = variant == "txn"
    return WorkloadSpec(
        topic=f"fuzz-{codec}-{variant}",
        records=rng.randint(200, 400),
        keys=rng.randint(50, 100),
        records_per_batch=rng.randint(10, 20),
        segment_bytes=rng.randint(3000, 6000),
        index_interval_bytes=rng.choice([512, 1024, 4096]),  # some segments with index entries
        tombstone_ratio=0.1,
        codec=codec,
        idempotent_producers=1,
        transactional_producers=2 if txn else 0,
        abort_ratio=0.4 if txn else 0.0,
        seed=rng.randrange(1_000_000),
    )


def gen_command(spec: WorkloadSpec) -> str:
    """The ``cleanerd gen`` line that writes the same log (for bug reports)."""
    default = WorkloadSpec()
    args = [
        f"--{name.replace('_', '-')} {value}"
        for name, value in spec.params().items()
        if value != getattr(default, name)
    ]
    return f"cleanerd gen L {' '.join(args)}  # then PartitionLog(L/{spec.topic}-0).roll()"


def snapshot(directory: Path) -> Snapshot:
    """Every file under ``directory`` by relative path."""
    return {
        str(p.relative_to(directory)): p.read_bytes()
        for p in sorted(directory.rglob("*"))
        if p.is_file()
    }


def read_survivors(part: Path) -> tuple[Survivors, list[str]]:
    """The data records left, and what is wrong with them for a full clean (a key twice, a
    tombstone left although ``--delete-retention-ms 0``, a record without a key)."""
    out: Survivors = {}
    wrong: list[str] = []
    log = PartitionLog(part)
    try:
        for batch in log.read():
            if batch.header.is_control:
                continue
            for r in batch.records():
                if r.key is None or r.value is None or r.key in out:
                    wrong.append(f"offset {r.offset}: unexpected record (key {r.key!r})")
                    continue
                out[r.key] = (r.offset, hashlib.sha256(r.value).hexdigest())
    finally:
        log.close()
    return out, wrong


@dataclass
class BaseLog:
    """One undamaged, rolled log dir and what a full clean of it keeps."""

    name: str
    spec: WorkloadSpec
    logdir: Path
    part: Path
    files: dict[str, bytes]  # the partition dir's files by name
    batches: dict[str, list[tuple[int, int, int, int]]]  # .log -> (pos, size, base, last)
    expected: Survivors

    @classmethod
    def build(cls, root: Path, codec: str, variant: str, seed: int) -> BaseLog:
        spec = base_spec(codec, variant, seed)
        logdir = root / f"{codec}-{variant}"
        generate(logdir, spec)
        part = logdir / f"{spec.topic}-0"
        log = PartitionLog(part)
        try:
            log.roll()  # everything cleanable: the cleaner never touches the active segment
            want = expected_survivors(log.read())
            values = {
                r.offset: r.value
                for b in log.read()
                if not b.header.is_control
                for r in b.records()
            }
        finally:
            log.close()
        expected: Survivors = {}
        for key, s in want.items():
            value = values[s.offset]
            if not s.tombstone and value is not None:
                expected[key] = (s.offset, hashlib.sha256(value).hexdigest())
        files = {p.name: p.read_bytes() for p in sorted(part.iterdir()) if p.is_file()}
        batches = {}
        for name, data in files.items():
            if name.endswith(".log"):
                b = scan_batches(data, path=name).batches
                cols = (k.B_POS, k.B_SIZE, k.B_BASE_OFFSET, k.B_LAST_OFFSET)
                batches[name] = [
                    (int(b[i, cols[0]]), int(b[i, cols[1]]), int(b[i, cols[2]]), int(b[i, cols[3]]))
                    for i in range(b.shape[0])
                ]
        report = verify_path(logdir)
        assert report.ok, [p.to_json() for p in report.problems]
        return cls(f"{codec}-{variant}", spec, logdir, part, files, batches, expected)

    def mutant(self, seed: int) -> Mutant:
        return make_mutant(self.files, self.batches, self.name, seed)


@dataclass
class Run:
    """What was observed around one ``compact`` of a mutant (facts only, no judgement)."""

    exit_code: int
    output: str
    error: str | None  # an exception other than SystemExit, formatted
    problems: list[tuple[str, str, str]]  # verify before: (file, check, message)
    before: Snapshot
    after: Snapshot
    survivors: Survivors | None = None  # exit 0 only
    wrong_records: list[str] = field(default_factory=list)
    problems_after: list[tuple[str, str, str]] = field(default_factory=list)  # exit 0 only


@dataclass
class Verdict:
    mutant: Mutant
    outcome: str
    reasons: list[str]

    def describe(self) -> str:
        return f"{self.mutant.describe()}\n  -> " + "\n  -> ".join(self.reasons)


def _is_index(path: str) -> bool:
    return path.endswith(INDEX_SUFFIXES)


def _problems_text(problems: list[tuple[str, str, str]]) -> str:
    return "; ".join(f"{Path(f).name}: {c}: {m}" for f, c, m in problems[:3])


def _survivor_diff(want: Survivors, got: Survivors) -> str:
    missing = sorted(set(want) - set(got))
    extra = sorted(set(got) - set(want))
    moved = sorted(key for key in set(want) & set(got) if want[key] != got[key])
    parts = [f"{len(got)} survivors, expected {len(want)}"]
    for label, keys in (("missing", missing), ("unexpected", extra), ("different", moved)):
        if keys:
            shown = ", ".join(f"{key!r}@{(got.get(key) or want[key])[0]}" for key in keys[:4])
            parts.append(f"{len(keys)} {label}: {shown}")
    return "; ".join(parts)


def _outside_active_indexes(
    problems: list[tuple[str, str, str]], files: Snapshot
) -> list[tuple[str, str, str]]:
    """Problems left after a clean, but those of the active segment's indexes: the cleaner
    never rewrites the active segment, and Kafka's load-time checks pass a whole garbage entry
    there (it is the writer's to recover); every other file was rewritten by the clean."""
    logs = [Path(name).name for name in files if name.endswith(".log")]
    if not logs:
        return problems
    active = max(logs).removesuffix("log")  # "<base offset>."
    return [p for p in problems if not (_is_index(p[0]) and Path(p[0]).name.startswith(active))]


def judge(base: BaseLog, mutant: Mutant, run: Run) -> Verdict:
    """The issue's oracle over one run's facts."""
    reasons: list[str] = []
    if run.error is not None:
        reasons.append(f"unexpected exception: {run.error}")
    if "Traceback" in run.output:
        reasons.append("a traceback in the output")
    data_problems = [p for p in run.problems if not _is_index(p[0])]
    if run.exit_code == 0:
        if data_problems:
            reasons.append(
                "silent partial result: exit 0 although verify reported "
                + _problems_text(data_problems)
            )
        if run.survivors is None:
            reasons.append("no survivors read")
        elif run.survivors != base.expected:
            reasons.append("survivors differ: " + _survivor_diff(base.expected, run.survivors))
        reasons += run.wrong_records[:3]
        left = _outside_active_indexes(run.problems_after, run.after)
        if left:
            reasons.append("verify after exit 0: " + _problems_text(left))
        outcome = INDEX_REPAIRED if mutant.index_only else COMPACTED
    elif run.exit_code == 1:
        if mutant.index_only:
            reasons.append("index-only damage refused (it must be repaired and compacted)")
        elif not data_problems and run.error is None:
            reasons.append("refused a log whose data verify found nothing wrong with")
        changed = sorted(
            name
            for name in run.before.keys() | run.after.keys()
            if run.before.get(name) != run.after.get(name)
        )
        if changed:
            reasons.append(f"exit 1 but {len(changed)} file(s) changed: {', '.join(changed[:6])}")
        elif "left as it was" not in run.output:  # issue 9: said exactly when it is true
            reasons.append("exit 1, every file byte-identical, but not said 'left as it was'")
        if not re.search(re.escape(str(base.part.name)) + r"/[^\s:]+", run.output):
            reasons.append("exit 1 without naming a file of the partition")
        outcome = REFUSED
    else:
        reasons.append(f"exit code {run.exit_code}")
        outcome = FAILURE
    if reasons:
        reasons.append("output: " + run.output.strip().replace("\n", " | ")[:600])
        outcome = FAILURE
    return Verdict(mutant, outcome, reasons)


def observe(base: BaseLog, mutant: Mutant, work: Path) -> Run:
    """Copy the base log to ``work``, damage it, verify it, compact it; collect the facts."""
    logdir = work / base.logdir.name
    if logdir.exists():
        shutil.rmtree(logdir)
    shutil.copytree(base.logdir, logdir)
    part = logdir / base.part.name
    mutant.apply(part)
    problems = [(p.file, p.check, p.message) for p in verify_path(logdir).problems]
    before = snapshot(logdir)
    result = CliRunner().invoke(cli, ["compact", str(logdir), *COMPACT_ARGS])
    error = None
    if result.exception is not None and not isinstance(result.exception, SystemExit):
        error = "".join(traceback.format_exception(result.exception)[-3:]).strip()
    run = Run(result.exit_code, result.output, error, problems, before, snapshot(logdir))
    if result.exit_code == 0:
        try:
            run.survivors, run.wrong_records = read_survivors(part)
        except Exception as exc:  # a fact to judge: exit 0 left a log that does not read
            run.wrong_records = [f"the log does not read after exit 0: {exc!r}"]
        after = verify_path(logdir).problems
        run.problems_after = [(p.file, p.check, p.message) for p in after]
    shutil.rmtree(logdir)
    return run


def fuzz_one(base: BaseLog, seed: int, work: Path) -> Verdict:
    """Make, run and judge the mutant ``seed`` of ``base``."""
    mutant = base.mutant(seed)
    return judge(base, mutant, observe(base, mutant, work))


def mutant_seeds(seed: int, count: int) -> list[int]:
    """The run's mutant seeds: a pure function of the run seed."""
    rng = random.Random(seed)
    return [rng.getrandbits(32) for _ in range(count)]


def base_names() -> list[str]:
    """Every base, in the order mutants are dealt to them (codec-major)."""
    return [f"{codec}-{variant}" for codec in CODECS for variant in VARIANTS]


def schedule(seed: int, count: int, names: list[str]) -> list[tuple[str, int]]:
    """(base name, mutant seed) of each of the run's mutants, dealt to the bases in turn; the
    CI test (a codec at a time) and the bench over every base run the same mutants."""
    return [(names[i % len(names)], s) for i, s in enumerate(mutant_seeds(seed, count))]
