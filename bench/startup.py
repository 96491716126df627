"""Start-up benchmark (issue 24): a short command's whole process, against ``python -c pass``.

Run ``.venv/bin/python bench/startup.py [TREE ...] [--rounds N] [--records N]``.

What an operator meets after installing and ``cleanerd warmup``: ``cleanerd --version``, and
``cleanerd verify`` of a small log dir (``--records`` records, one partition, written by
``cleanerd gen``) with the kernel cache warm. Each TREE (default: this checkout) is a checkout
of cleanerd, imported through ``PYTHONPATH`` as ``bench/compare.py`` does; per tree the bench
first does what an install does (``compileall``: pip writes the bytecode of what it installs)
and runs ``cleanerd warmup`` into a kernel cache of that tree's own (``NUMBA_CACHE_DIR`` under
``--out``), so no timed run compiles anything.

Every round runs each command of each tree once and ``python -c pass`` once, in an order that
rotates from round to round, so a machine whose speed drifts (other jobs) slows them alike.
Each figure is the median over the rounds of the whole process: wall time, and CPU time (user +
system, from the children's rusage), which on a loaded machine says what the code costs while
the wall time also counts waits for a core. ``ratio_to_python`` is the median of the per-round
ratios to that round's ``python -c pass``. With two trees or more, ``head_over_base`` is the
median of the per-round ratios of the last tree to the first, and ``each_over_previous`` that of
each tree to the one before it (a series of commits: what each step bought).

Commands run as the console script does (``from cleanerd.cli import main``), not through
``-m`` (runpy). ``imports`` counts the modules one extra run had imported at exit, and says
whether numba's compiler was set up (``numba.np.arraymath`` loaded: it is imported only to
compile, see ``cleanerd/_kernel.py``). Prints one JSON document on stdout, progress on stderr.
"""

from __future__ import annotations

import argparse
import hashlib
import itertools
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT / "bench") not in sys.path:
    sys.path.insert(0, str(ROOT / "bench"))

from _facts import emit  # noqa: E402

# the console script's body (pyproject's [project.scripts]), without runpy's import
CONSOLE = "import sys; sys.argv[0] = 'cleanerd'; from cleanerd.cli import main; sys.exit(main())"
MARK = "--- modules:"
COMPILER_SET_UP = "numba.np.arraymath"  # imported by numba's registries, which only compile needs


def _log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def _env(tree: Path, cache: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("NUMBA_", "PYTHON"))}
    return env | {"PYTHONPATH": str(tree), "NUMBA_CACHE_DIR": str(cache)}


def _cleanerd(*args: str) -> list[str]:
    # -P: no working dir first on sys.path (a script's own dir is its bin/), so PYTHONPATH's
    # tree is the one imported wherever the bench runs from
    return [sys.executable, "-P", "-c", CONSOLE, *args]


def _prepare(tree: Path, out: Path) -> dict[str, str]:
    """Bytecode and a warm kernel cache for ``tree``; the environment its runs use."""
    if not (tree / "cleanerd" / "__init__.py").is_file():
        raise SystemExit(f"{tree} is not a checkout of cleanerd (no cleanerd/__init__.py)")
    digest = hashlib.sha256(str(tree.resolve()).encode()).hexdigest()[:12]
    env = _env(tree, out / f"startup-cache-{digest}")
    found = subprocess.run(
        [sys.executable, "-P", "-c", "import cleanerd; print(cleanerd.__file__)"],
        check=True, env=env, capture_output=True, text=True,
    ).stdout.strip()  # fmt: skip
    if Path(found).resolve() != (tree / "cleanerd" / "__init__.py").resolve():
        raise SystemExit(f"{tree}: the runs would import {found}, not this tree's cleanerd")
    subprocess.run(
        [sys.executable, "-m", "compileall", "-q", str(tree / "cleanerd")], check=True, env=env
    )
    _log(f"{tree}: cleanerd warmup ...")
    done = subprocess.run(_cleanerd("warmup"), check=False, env=env, capture_output=True, text=True)
    if done.returncode != 0:
        raise SystemExit(f"{tree}: cleanerd warmup failed:\n{done.stderr}")
    _log(f"  {done.stdout.strip()}")
    return env


def _run(cmd: list[str], env: dict[str, str] | None) -> tuple[float, float]:
    """Wall and CPU seconds of one whole process (it must exit 0)."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.perf_counter()
    done = subprocess.run(
        cmd, check=False, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE
    )
    wall = time.perf_counter() - started
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if done.returncode != 0:
        raise SystemExit(f"{cmd} exited {done.returncode}:\n{done.stderr.decode()}")
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return wall, cpu


def _imports(cmd: list[str], env: dict[str, str]) -> dict[str, Any]:
    """What one more run of ``cmd`` (a ``_cleanerd`` command) had imported when it exited."""
    probe = f"import atexit, sys; atexit.register(lambda: print({MARK!r}, *sys.modules))\n"
    done = subprocess.run(
        [*cmd[:3], probe + CONSOLE, *cmd[4:]], check=True, env=env, capture_output=True, text=True
    )
    modules = set(done.stdout.split(MARK, 1)[1].split())
    return {
        "modules": len(modules),
        "cleanerd_modules": sum(m.startswith("cleanerd") for m in modules),
        "numba": "numba" in modules,
        "numba_compiler_set_up": COMPILER_SET_UP in modules,
    }


def _median(values: list[float]) -> float:
    return round(statistics.median(values), 4)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("trees", nargs="*", type=Path, help="checkouts of cleanerd [this one]")
    parser.add_argument("--rounds", type=int, default=15, help="timed runs of each command")
    parser.add_argument("--records", type=int, default=1000, help="records in the log dir")
    parser.add_argument("--out", type=Path, default=ROOT / "bench" / "out", help="kernel caches")
    args = parser.parse_args()
    load_at_start = os.getloadavg()
    trees = [t.resolve() for t in args.trees] or [ROOT]
    args.out.mkdir(parents=True, exist_ok=True)
    envs = {tree: _prepare(tree, args.out) for tree in trees}
    with tempfile.TemporaryDirectory(prefix="cleanerd-startup-") as tmp:
        logdir = Path(tmp) / "logs"
        first = envs[trees[0]]
        subprocess.run(
            _cleanerd("gen", str(logdir), "--records", str(args.records)),
            env=first, check=True, capture_output=True,
        )  # fmt: skip
        commands = {"version": ["--version"], "verify": ["verify", str(logdir)]}
        runs: list[tuple[str, Path | None, list[str]]] = [
            ("python", None, [sys.executable, "-c", "pass"])
        ]
        runs += [(name, tree, _cleanerd(*a)) for tree in trees for name, a in commands.items()]
        for _, tree, cmd in runs:  # untimed: the page cache holds every file afterwards
            _run(cmd, envs[tree] if tree else None)
        wall: dict[int, list[float]] = {i: [] for i in range(len(runs))}
        cpu: dict[int, list[float]] = {i: [] for i in range(len(runs))}
        for r in range(args.rounds):
            shift = r % len(runs)
            for i in [*range(shift, len(runs)), *range(shift)]:
                _, tree, cmd = runs[i]
                w, c = _run(cmd, envs[tree] if tree else None)
                wall[i].append(w)
                cpu[i].append(c)
            _log(f"round {r + 1}/{args.rounds}")
        imports = {
            (name, tree): _imports(cmd, envs[tree]) for name, tree, cmd in runs if tree is not None
        }
    results: dict[str, Any] = {}
    for i, (name, tree, _) in enumerate(runs):
        entry: dict[str, Any] = {
            "wall_seconds": _median(wall[i]),
            "cpu_seconds": _median(cpu[i]),
            "wall_min_max": [round(min(wall[i]), 4), round(max(wall[i]), 4)],
        }
        if tree is not None:
            entry["ratio_to_python"] = {
                "wall": _median([a / b for a, b in zip(wall[i], wall[0], strict=True)]),
                "cpu": _median([a / b for a, b in zip(cpu[i], cpu[0], strict=True)]),
            }
            entry["imports"] = imports[(name, tree)]
            results.setdefault(str(tree), {})[name] = entry
        else:
            results[name] = entry
    if len(trees) > 1:
        # per-round ratios, tree to tree: what each step from one tree to the next bought
        index = {(name, str(tree)): i for i, (name, tree, _) in enumerate(runs)}

        def paired(name: str, head: Path, base: Path) -> dict[str, float]:
            a, b = index[(name, str(head))], index[(name, str(base))]
            return {
                kind: _median([h / o for h, o in zip(series[a], series[b], strict=True)])
                for kind, series in (("wall", wall), ("cpu", cpu))
            }

        results["head_over_base"] = {name: paired(name, trees[-1], trees[0]) for name in commands}
        results["each_over_previous"] = {
            str(tree): {name: paired(name, tree, before) for name in commands}
            for before, tree in itertools.pairwise(trees)
        }
    emit(
        "startup",
        load_at_start,
        rounds=args.rounds,
        records=args.records,
        trees=[str(t) for t in trees],
        results=results,
    )


if __name__ == "__main__":
    main()
