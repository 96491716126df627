"""Seeded damage to a partition dir: what a bad disk, a bad copy or a bad tool does to a log.

A mutant is a list of edits drawn from ``random.Random(seed)`` against the base log's files:
batch-header fields (base offset, length, CRC, attributes, producer id, last offset delta...),
random bytes anywhere in a ``.log``, a ``.log`` cut inside a batch, bytes appended to a ``.log``
(garbage, a torn batch, a copy of a real batch), and ``.index``/``.timeindex``/``.txnindex``
files deleted, cut, overwritten or extended. The active (empty) segment's ``.log`` is never
touched: it belongs to the writer. A cut exactly at a batch boundary is never drawn: it leaves
a valid, shorter segment that no check could tell from a compacted one.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

# name -> (first byte in the batch, size); docs/kafka-format.md §2.1, big-endian
HEADER_FIELDS: dict[str, tuple[int, int]] = {
    "base_offset": (0, 8),
    "length": (8, 4),
    "leader_epoch": (12, 4),
    "magic": (16, 1),
    "crc": (17, 4),
    "attributes": (21, 2),
    "last_offset_delta": (23, 4),
    "base_timestamp": (27, 8),
    "max_timestamp": (35, 8),
    "producer_id": (43, 8),
    "producer_epoch": (51, 2),
    "base_sequence": (53, 4),
    "records_count": (57, 4),
}
# the fields the cleaner decides on weigh most (issue 9's list)
FIELD_WEIGHTS = {
    "base_offset": 5,
    "length": 5,
    "crc": 3,
    "attributes": 5,
    "producer_id": 4,
    "last_offset_delta": 4,
    "records_count": 2,
    "magic": 1,
    "leader_epoch": 1,
    "base_timestamp": 1,
    "max_timestamp": 1,
    "producer_epoch": 1,
    "base_sequence": 1,
}
INDEX_SUFFIXES = (".index", ".timeindex", ".txnindex")

Files = dict[str, bytes | None]  # name -> content; None: deleted
Rows = dict[str, list[tuple[int, int, int, int]]]  # .log -> (pos, size, base offset, last)


@dataclass(frozen=True)
class Mutant:
    """The files a mutant changes (final contents; None deletes) and how it got there."""

    base: str
    seed: int
    edits: tuple[str, ...]
    changed: tuple[tuple[str, bytes | None], ...]

    @property
    def index_only(self) -> bool:
        return all(name.endswith(INDEX_SUFFIXES) for name, _ in self.changed)

    def describe(self) -> str:
        return f"base {self.base} mutant seed {self.seed}: " + "; ".join(self.edits)

    def apply(self, part: Path) -> None:
        for name, data in self.changed:
            path = part / name
            if data is None:
                path.unlink(missing_ok=True)
            else:
                path.write_bytes(data)


class _Draw:
    """One mutant's edits, drawn and applied to an in-memory copy of the files."""

    def __init__(self, files: dict[str, bytes], rows: Rows, rng: random.Random) -> None:
        self.files: Files = dict(files)
        self.rows = rows
        self.rng = rng
        self.edits: list[str] = []
        logs = sorted(name for name in files if name.endswith(".log"))
        self.logs = [name for name in logs[:-1] if files[name]]  # never the active segment
        self.bases = [int(name.split(".")[0]) for name in logs]

    def data(self, name: str) -> bytearray:
        content = self.files[name]
        return bytearray(content if content is not None else b"")

    def pick_batch(self) -> tuple[str, int, int, int, int] | None:
        """A whole batch still present in a random segment: (log, pos, size, base, last)."""
        name = self.rng.choice(self.logs)
        size = len(self.data(name))
        rows = [r for r in self.rows[name] if r[0] + r[1] <= size]
        if not rows:
            return None
        return (name, *self.rng.choice(rows))

    def header(self) -> None:
        picked = self.pick_batch()
        if picked is None:
            return self.random_bytes()
        name, pos, _, base, last = picked
        rng = self.rng
        fname = rng.choices(list(FIELD_WEIGHTS), weights=list(FIELD_WEIGHTS.values()))[0]
        start, width = HEADER_FIELDS[fname]
        raw = self.data(name)
        old = bytes(raw[pos + start : pos + start + width])
        how = rng.random()
        new = bytearray(old)
        if how < 0.4:
            new[rng.randrange(width)] = rng.randrange(256)
        elif how < 0.7:
            new[rng.randrange(width)] ^= 1 << rng.randrange(8)
        else:
            value = rng.choice(self.interesting(fname, int.from_bytes(old, "big", signed=True)))
            new = bytearray((value % (1 << 8 * width)).to_bytes(width, "big"))
        if bytes(new) == old:
            new[-1] ^= 1
        raw[pos + start : pos + start + width] = new
        self.files[name] = bytes(raw)
        self.edits.append(
            f"{name}: batch at byte {pos} (offsets {base}..{last}): {fname} bytes "
            f"{pos + start}-{pos + start + width - 1} {old.hex()} -> {new.hex()}"
        )
        return None

    def interesting(self, fname: str, old: int) -> list[int]:
        """Values that sit on a check's edge: neighbours, zero, -1, the next segment's base..."""
        values = [0, -1, old + 1, old - 1, self.rng.getrandbits(31)]
        if fname == "base_offset":
            values += [*[b for b in self.bases if b > old][:1], old + 2**31, 2**63 - 1]
        elif fname == "length":
            values += [old + self.rng.randint(1, 64), old - self.rng.randint(1, 64), 49, 2**31 - 1]
        elif fname == "attributes":
            values += [old ^ 0x10, old ^ 0x20, old ^ 0x40, (old & ~7) | self.rng.randrange(8)]
        elif fname == "producer_id":
            values += [old ^ 1, 1]
        elif fname in ("last_offset_delta", "records_count"):
            values += [old + self.rng.randint(2, 20), 2**31 - 1]
        return values

    def random_bytes(self) -> None:
        name = self.rng.choice(self.logs)
        raw = self.data(name)
        for _ in range(self.rng.randint(1, 4)):
            pos = self.rng.randrange(len(raw))
            old = raw[pos]
            if self.rng.random() < 0.5:
                raw[pos] ^= 1 << self.rng.randrange(8)
            else:
                raw[pos] = self.rng.choice([v for v in range(256) if v != old])
            self.edits.append(f"{name}: byte {pos} {old:02x} -> {raw[pos]:02x}")
        self.files[name] = bytes(raw)

    def truncate_log(self) -> None:
        picked = self.pick_batch()
        if picked is None:
            return self.random_bytes()
        name, pos, size, base, _ = picked
        cut = pos + self.rng.randint(1, size - 1)  # strictly inside the batch
        self.files[name] = bytes(self.data(name)[:cut])
        self.edits.append(f"{name}: cut to {cut} bytes (inside the batch at byte {pos}, {base})")
        return None

    def append_log(self) -> None:
        name = self.rng.choice(self.logs)
        how = self.rng.random()
        donor = self.rng.choice(self.logs)
        bpos, bsize, bbase, _ = self.rng.choice(self.rows[donor])
        batch = (self.files[donor] or b"")[bpos : bpos + bsize]
        if how < 0.4 or len(batch) < bsize:
            extra = self.rng.randbytes(self.rng.randint(1, 100))
            what = f"{len(extra)} random bytes"
        elif how < 0.7:
            extra = batch[: self.rng.randint(1, bsize - 1)]
            what = f"the first {len(extra)} bytes of the batch at {donor} byte {bpos}"
        else:
            extra = batch
            what = f"a copy of the batch at {donor} byte {bpos} (base offset {bbase})"
        self.files[name] = bytes(self.data(name)) + extra
        self.edits.append(f"{name}: appended {what}")

    def index(self) -> None:
        names = sorted(n for n, d in self.files.items() if n.endswith(INDEX_SUFFIXES))
        names += [n for n in names if n.endswith(".txnindex")] * 3  # rarer files, weighted up
        if not names:
            return self.random_bytes()
        name = self.rng.choice(names)
        raw = self.data(name)
        how = self.rng.random() if raw else 0.5 + self.rng.random() * 0.2  # empty: extend it
        if how < 0.25:
            self.files[name] = None
            self.edits.append(f"{name}: deleted")
        elif how < 0.5:
            cut = self.rng.randrange(len(raw))
            self.files[name] = bytes(raw[:cut])
            self.edits.append(f"{name}: cut to {cut} bytes (of {len(raw)})")
        elif how < 0.7:
            extra = self.rng.randbytes(self.rng.randint(1, 30))
            self.files[name] = bytes(raw) + extra
            self.edits.append(f"{name}: appended {len(extra)} random bytes {extra.hex()}")
        else:
            for _ in range(self.rng.randint(1, 4)):
                pos = self.rng.randrange(len(raw))
                old = raw[pos]
                raw[pos] = self.rng.choice([v for v in range(256) if v != old])
                self.edits.append(f"{name}: byte {pos} {old:02x} -> {raw[pos]:02x}")
            self.files[name] = bytes(raw)
        return None


KINDS: dict[str, tuple[int, Callable[[_Draw], None]]] = {
    "header": (40, _Draw.header),
    "bytes": (15, _Draw.random_bytes),
    "truncate": (10, _Draw.truncate_log),
    "append": (10, _Draw.append_log),
    "index": (25, _Draw.index),
}


def make_mutant(files: dict[str, bytes], rows: Rows, base: str, seed: int) -> Mutant:
    """Mutant ``seed`` of a partition dir whose files are ``files`` (one to three edits)."""
    rng = random.Random(seed)
    draw = _Draw(files, rows, rng)
    count = 1 if rng.random() < 0.85 else rng.randint(2, 3)
    weights = [w for w, _ in KINDS.values()]
    for _ in range(count):
        kind = rng.choices(list(KINDS), weights=weights)[0]
        KINDS[kind][1](draw)
    changed = tuple(
        (name, data) for name, data in sorted(draw.files.items()) if data != files.get(name)
    )
    if not changed:  # e.g. an index cut to its own length: flip a byte instead
        draw.random_bytes()
        changed = tuple(
            (name, data) for name, data in sorted(draw.files.items()) if data != files.get(name)
        )
    return Mutant(base, seed, tuple(draw.edits), changed)
