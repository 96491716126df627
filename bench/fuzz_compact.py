"""Corrupt-log fuzzing of ``cleanerd compact`` at scale: the CI fuzz test with many more mutants.

Run ``.venv/bin/python bench/fuzz_compact.py [--mutants N] [--seed S] [--codecs ...]``.

For each codec and variant (``plain``: an idempotent producer; ``txn``: two transactional
producers aborting 40% of their transactions, and an idempotent one) a small log of several
segments is generated from ``--seed`` and rolled. The mutants are dealt to the bases in turn;
each damages its base's log as its own seed says (``tests/support/fuzz_mutations.py``) and is
judged by the oracle of ``tests/compaction/test_compact_fuzz.py``
(``tests/support/fuzz_support.py``): no traceback; exit 0 with the model's survivors, and only
when ``verify`` saw no damage to data; exit 1 with every file byte-identical and a file named.
Mutants run one after another in ``--work`` (tmpfs by default: ``compact`` fsyncs, which on a
disk would be most of the run).

Prints one JSON document on stdout: counts per outcome (``compacted``, ``index-repaired``,
``refused``, ``failure``), per base, the ``cleanerd gen`` line of each base, and every failure
with its base, mutant seed, mutation and reasons. ``--replay BASE:SEED`` runs one mutant and
prints its verdict; with ``--keep DIR`` the damaged log dir (before compaction) is copied to
``DIR`` to be examined or compacted by hand. Exit status 1 when any mutant failed.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
for entry in (ROOT, ROOT / "bench"):
    if str(entry) not in sys.path:
        sys.path.insert(0, str(entry))

from cleanerd._jitcache import configure_numba_cache  # noqa: E402

configure_numba_cache()  # before numba loads: importing cleanerd chooses no cache dir

from _facts import emit  # noqa: E402

from tests.support.fuzz_support import (  # noqa: E402
    CODECS,
    FAILURE,
    OUTCOMES,
    VARIANTS,
    BaseLog,
    fuzz_one,
    gen_command,
    schedule,
)


def _args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--mutants", type=int, default=2000, help="how many mutants (default 2000)")
    p.add_argument("--seed", type=int, default=9, help="run seed: bases and mutants (default 9)")
    p.add_argument("--codecs", nargs="+", choices=CODECS, default=list(CODECS))
    p.add_argument("--variants", nargs="+", choices=VARIANTS, default=list(VARIANTS))
    default_work = "/dev/shm" if os.access("/dev/shm", os.W_OK) else tempfile.gettempdir()
    p.add_argument("--work", type=Path, default=Path(default_work), help="scratch parent dir")
    p.add_argument("--replay", metavar="BASE:SEED", help="run one mutant, e.g. lz4-txn:12345")
    p.add_argument("--keep", type=Path, help="with --replay: copy the damaged log dir here")
    return p.parse_args(argv)


def _replay(args: argparse.Namespace, root: Path) -> int:
    name, _, seed = args.replay.partition(":")
    codec, _, variant = name.partition("-")
    base = BaseLog.build(root / "bases", codec, variant, args.seed)
    mutant = base.mutant(int(seed))
    if args.keep is not None:
        shutil.copytree(base.logdir, args.keep)
        mutant.apply(args.keep / base.part.name)
        print(f"damaged log dir: {args.keep}", file=sys.stderr)
    verdict = fuzz_one(base, int(seed), root / "work")
    print(gen_command(base.spec))
    print(verdict.outcome)
    print(verdict.describe())
    return 1 if verdict.outcome == FAILURE else 0


def main(argv: list[str] | None = None) -> int:
    args = _args(argv)
    load = os.getloadavg()
    root = Path(tempfile.mkdtemp(prefix="fuzz-compact-", dir=args.work))
    try:
        if args.replay:
            return _replay(args, root)
        started = time.perf_counter()
        bases = {
            f"{codec}-{variant}": BaseLog.build(root / "bases", codec, variant, args.seed)
            for codec in CODECS
            for variant in VARIANTS
            if codec in args.codecs and variant in args.variants
        }
        totals: Counter[str] = Counter()
        per_base: dict[str, Counter[str]] = {name: Counter() for name in bases}
        failures: list[dict[str, Any]] = []
        for i, (name, seed) in enumerate(schedule(args.seed, args.mutants, list(bases))):
            base = bases[name]
            verdict = fuzz_one(base, seed, root / "work")
            totals[verdict.outcome] += 1
            per_base[base.name][verdict.outcome] += 1
            if verdict.outcome == FAILURE:
                failures.append(
                    {
                        "base": base.name,
                        "mutant_seed": seed,
                        "mutation": list(verdict.mutant.edits),
                        "reasons": verdict.reasons,
                    }
                )
                print(f"FAILED {verdict.describe()}", file=sys.stderr)
            if (i + 1) % 100 == 0:
                print(f"{i + 1}/{args.mutants} {dict(totals)}", file=sys.stderr)
        seconds = time.perf_counter() - started
        emit(
            "fuzz_compact",
            load,
            seed=args.seed,
            mutants=args.mutants,
            outcomes={o: totals[o] for o in OUTCOMES},
            per_base={n: {o: c[o] for o in OUTCOMES} for n, c in per_base.items()},
            bases={n: gen_command(b.spec) for n, b in bases.items()},
            seconds=round(seconds, 1),
            failures=failures,
        )
        return 1 if failures else 0
    finally:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
