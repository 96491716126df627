"""``cleanerd._kernel``: a kernel's kept machine code runs without numba, and whatever the kept
copy cannot answer (another argument type, a changed source, a foreign or broken copy) goes to
numba with the same results.

Each run is a fresh process (numba's dispatchers and the loaded code live for the process) over
a small kernel module of the test's own, with a kernel cache of its own.
"""

from __future__ import annotations

import json
import os
import pickle
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from numba import typeof as numba_typeof

from cleanerd._kernel import LIGHT_DIR, _arg_key, _type_key

typeof: Any = numba_typeof

REPO = Path(__file__).resolve().parents[2]

_MODULE = """
import numpy as np
from cleanerd._kernel import kernel


@kernel(inline="always")
def _plus(x, y):
    return x + y


@kernel(nogil=True)
def add_into(a, b, out):
    for i in range(a.shape[0]):
        out[i] = _plus(a[i], b)


@kernel()
def doubled(a):
    twice = a * 2  # a new array: numba's runtime allocates and frees it
    return twice.sum(), twice.shape[0]


@kernel()
def first_sum(a, n):
    if n > a.shape[0]:
        raise ValueError("first_sum: n is past the end")
    return a[:n].sum()
"""

# each step records whether numba was imported by then
_RUN = """
import json, sys
import numpy as np
import kmod
from cleanerd._kernel import kernels
seen = {}
a = np.arange(5, dtype=np.int64)
out = np.zeros(5, dtype=np.int64)
kmod.add_into(a, 3, out)
seen["add_into"] = out.tolist()
seen["doubled"] = list(kmod.doubled(a))
seen["first_sum"] = int(kmod.first_sum(a, 3))
kept = {k.__name__: len(k.light_signatures()) for k in kernels() if k.__module__ == "kmod"}
seen["light"] = {name: kept[name] for name in ("add_into", "doubled")}
seen["numba_after_kept"] = "numba" in sys.modules
try:
    kmod.first_sum(a, 9)
except ValueError as exc:
    seen["error"] = str(exc)
f = np.linspace(0.0, 1.0, 5)
outf = np.zeros(5)
kmod.add_into(f, 0.5, outf)
seen["float"] = outf.tolist()
print(json.dumps(seen))
"""
# a signature no run compiled before: numba compiles it next to kept kernels (``_plus`` must be
# numba's dispatcher by then for numba to inline it)
_NEW_SIGNATURE = """
u = np.arange(5, dtype=np.uint16)
outu = np.zeros(5, dtype=np.uint16)
kmod.add_into(u, np.uint16(2), outu)
print(json.dumps(dict(seen, uint16=outu.tolist(), numba="numba" in sys.modules)))
"""

_EXPECTED = {
    "add_into": [3, 4, 5, 6, 7],
    "doubled": [20, 5],
    "first_sum": 3,
    "error": "first_sum: n is past the end",
    "float": [0.5, 0.75, 1.0, 1.25, 1.5],
}


def _run(
    work: Path, script: str = _RUN, *, cache_dir: bool = True, expected: bool = True
) -> dict[str, Any]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("NUMBA_", "PYTHON"))}
    env |= {"PYTHONPATH": f"{REPO}{os.pathsep}{work}"}
    if cache_dir:  # else numba's own choice: the __pycache__ beside the source
        env["NUMBA_CACHE_DIR"] = str(work / "cache")
    done = subprocess.run(
        [sys.executable, "-c", script], env=env, capture_output=True, text=True, check=False
    )
    assert done.returncode == 0, done.stderr
    result: dict[str, Any] = json.loads(done.stdout.splitlines()[-1])
    for key, value in _EXPECTED.items() if expected else ():
        assert result.get(key) == value, (key, result)
    return result


def _kept(work: Path, name: str) -> Path:
    (found,) = (work / "cache" / LIGHT_DIR).glob(f"kmod.{name}-*.pickle")
    return found


@pytest.fixture
def work(tmp_path: Path) -> Path:
    (tmp_path / "kmod.py").write_text(_MODULE)
    first = _run(tmp_path)  # compiles, and keeps a copy of each signature numba caches
    assert first["light"] == {"add_into": 0, "doubled": 0}
    assert first["numba_after_kept"]
    return tmp_path


@pytest.mark.slow
def test_kept_kernels_run_without_numba_and_the_rest_goes_to_numba(work: Path) -> None:
    second = _run(work)
    # int64 add_into and doubled came from the kept copies, numba was not imported for them;
    # the float64 add_into (compiled in the first run too) also has its copy now
    assert second["light"] == {"add_into": 2, "doubled": 1}
    assert second["numba_after_kept"] is False
    third = _run(work, _RUN + _NEW_SIGNATURE)
    assert third["numba_after_kept"] is False
    assert (third["uint16"], third["numba"]) == ([2, 3, 4, 5, 6], True)


# what a batch matrix's column is to numba: "A" (strided), or "C" when it holds one row (numpy
# calls an array of one element contiguous whatever its strides)
_COLUMN = """
import json, sys
import numpy as np
import kmod
m = np.arange(10, dtype=np.int32).reshape(5, 2)
out = np.zeros(ROWS, dtype=np.int32)
kmod.add_into(m[:ROWS, 1], 1, out)
print(json.dumps({"out": out.tolist(), "numba": "numba" in sys.modules}))
"""


@pytest.mark.slow
def test_a_contiguous_array_runs_on_a_copy_kept_for_any_layout(work: Path) -> None:
    """Code kept for an "A" array takes a "C" one: a chunk of one batch neither compiles a
    kernel anew nor imports numba in the middle of a cleaning."""
    strided = _run(work, _COLUMN.replace("ROWS", "5"), expected=False)  # keeps the "A" code
    assert strided["out"] == [2, 4, 6, 8, 10]
    one = _run(work, _COLUMN.replace("ROWS", "1"), expected=False)
    assert one == {"out": [2], "numba": False}
    again = _run(work, _COLUMN.replace("ROWS", "5"), expected=False)
    assert again == {"out": [2, 4, 6, 8, 10], "numba": False}


@pytest.mark.slow
def test_a_changed_source_file_is_not_loaded_from_its_kept_copy(work: Path) -> None:
    source = work / "kmod.py"
    source.write_text(source.read_text() + "\n# changed\n")  # size and mtime: numba's check
    again = _run(work)
    assert again["light"] == {"add_into": 0, "doubled": 0}
    assert again["numba_after_kept"]
    assert _run(work)["numba_after_kept"] is False  # kept anew for the new source


@pytest.mark.slow
def test_a_broken_or_foreign_copy_goes_to_numba(work: Path) -> None:
    _kept(work, "doubled").write_bytes(b"not a pickle")
    path = _kept(work, "add_into")
    kept = pickle.loads(path.read_bytes())
    kept["builds"] = ("another numba",)
    path.write_bytes(pickle.dumps(kept))
    again = _run(work)
    assert again["light"] == {"add_into": 0, "doubled": 0}
    assert again["numba_after_kept"]


@pytest.mark.slow
def test_numba_with_other_internals_loads_its_own_way(work: Path) -> None:
    """The dispatcher's light cache load (no compiler set-up) and numba's own full load, which
    it falls back to when numba's cache internals are not the ones it knows."""
    numba_first = "import cleanerd._kernel as k\nk.use_numba()\n"
    # one of the registries numba's compiler set-up imports, which no kernel here links to
    probe = "\nprint(json.dumps(dict(seen, setup='numba.cpython.heapq' in sys.modules)))"
    light = _run(work, numba_first + _RUN + probe)
    assert light["setup"] is False  # cached signatures loaded without the compiler's set-up...
    other = "k._light_internals = lambda cache: None\n"
    full = _run(work, numba_first + other + _RUN + probe)
    assert full["setup"] is True  # ...and by numba's own load, same results


def _unaligned() -> Any:
    return np.frombuffer(bytes(17), dtype=np.uint8)[1:].view(np.int64)


def test_argument_keys_say_what_numbas_typeof_says() -> None:
    """The key a call is matched by (``_arg_key``) against the key kept from numba's signature
    (``_type_key``): numba's own ``typeof`` is the oracle."""
    readonly = np.frombuffer(b"abcdefgh", dtype=np.uint8)
    grid = np.zeros((3, 4), dtype=np.int32)
    values = [
        np.arange(6, dtype=np.int64), readonly, grid, grid.T, grid[:, 1], np.zeros(3, np.bool_),
        np.zeros((2, 2), dtype=np.float64, order="F"), 7, -(2**63), 2**63, True, 1.5,
        np.uint16(3), np.bool_(True), np.float32(0.5), np.int64(-1),
    ]  # fmt: skip
    for value in values:
        key = _arg_key(value)
        assert key is not None, value
        assert key == _type_key(typeof(value)), value
    # what the kept copies never take: numba decides
    for value in ["s", (1, 2), None, np.zeros(2, dtype=">i8"), np.zeros(2, "U3"), _unaligned()]:
        assert _arg_key(value) is None, value


_CLOCKED = """
from cleanerd.compaction import compile_clock
with compile_clock() as clock:
    exec(RUN)
    u = np.arange(5, dtype=np.uint16)
    kmod.add_into(u, np.uint16(2), np.zeros(5, dtype=np.uint16))
print(json.dumps(dict(seen, compiled=clock.kernels)))
"""


@pytest.mark.slow
def test_the_compile_clock_counts_a_compile_that_brings_numba_in(work: Path) -> None:
    """``compile_clock`` imports no numba (kept kernels run without it), yet a compile in its
    block that brings numba in is counted."""
    run = _RUN.replace("print(json.dumps(seen))", "")
    clocked = _run(work, f"import json, sys\nimport numpy as np\nRUN = {run!r}\n" + _CLOCKED)
    assert clocked["numba_after_kept"] is False
    assert [name.split("(")[0] for name in clocked["compiled"]] == ["kmod.add_into"]


@pytest.mark.slow
def test_without_a_cache_dir_the_copies_are_kept_beside_numbas_in_tree_cache(
    tmp_path: Path,
) -> None:
    """A writable install (a venv of the user's own): cleanerd sets no ``NUMBA_CACHE_DIR`` and
    numba caches in the ``__pycache__`` beside each source; the kept copies go there too, and
    the next run needs no numba."""
    (tmp_path / "kmod.py").write_text(_MODULE)
    first = _run(tmp_path, cache_dir=False)
    assert first["numba_after_kept"]
    assert list((tmp_path / "__pycache__" / LIGHT_DIR).glob("kmod.add_into-*.pickle"))
    second = _run(tmp_path, cache_dir=False)
    assert second["light"] == {"add_into": 2, "doubled": 1}
    assert second["numba_after_kept"] is False


@pytest.mark.slow
def test_a_signature_numba_only_loads_is_kept_by_warmup_alone(work: Path) -> None:
    """A command that finds a signature in numba's cache but not among the kept copies writes
    nothing (its cache may be a read-only volume, or an image's); warmup keeps it."""
    kept_dir = work / "cache" / LIGHT_DIR
    shutil.rmtree(kept_dir)
    again = _run(work)  # every signature loaded by numba from its cache, none compiled
    assert again["numba_after_kept"]
    assert not kept_dir.exists()
    warm = _run(work, "import cleanerd._kernel as k\nk.use_numba(keep_loaded=True)\n" + _RUN)
    assert warm["light"] == {"add_into": 0, "doubled": 0}
    assert _run(work)["numba_after_kept"] is False  # kept by the warmup-like run


_OTHER_PACKAGES = "import cleanerd._kernel as k\nk._packages_seen = 'another tree'\n"
_COUNTED = """
from cleanerd.compaction import compile_clock
with compile_clock() as clock:
    exec(RUN)
print(json.dumps(dict(seen, compiled=sorted({n.split("(")[0] for n in clock.kernels}))))
"""


@pytest.mark.slow
def test_a_change_in_the_kernel_packages_compiles_every_kernel_anew(work: Path) -> None:
    """A kernel's code holds the kernels it calls and the constants it reads, from other files
    than its own: a change to any source of ``KERNEL_PACKAGES`` (here: their digest differs)
    is compiled, by numba's cache and the kept copies alike, then kept for the next run."""
    run = _RUN.replace("print(json.dumps(seen))", "")
    script = f"import json, sys\nimport numpy as np\nRUN = {run!r}\n" + _COUNTED
    changed = _run(work, _OTHER_PACKAGES + script)
    assert changed["light"] == {"add_into": 0, "doubled": 0}
    assert changed["compiled"] == ["kmod.add_into", "kmod.doubled", "kmod.first_sum"]
    again = _run(work, _OTHER_PACKAGES + script)
    assert again["numba_after_kept"] is False
    assert again["compiled"] == []


def test_the_packages_digest_follows_every_source_in_them(tmp_path: Path) -> None:
    """Names and contents of every source in the kernel packages, nested ones too; not their
    mtimes (an image layer keeps them to the second), nor other packages or compiled files."""
    from cleanerd._kernel import KERNEL_PACKAGES, sources_digest  # noqa: PLC0415

    for name in KERNEL_PACKAGES:
        (tmp_path / name / "sub").mkdir(parents=True)
        (tmp_path / name / "a.py").write_text(f"A = '{name}'\n")
        (tmp_path / name / "sub" / "b.py").write_text("B = 1\n")
    (tmp_path / "cli").mkdir()
    first = sources_digest(str(tmp_path))
    nested = tmp_path / KERNEL_PACKAGES[0] / "sub" / "b.py"
    os.utime(nested, ns=(0, 10**9))
    (tmp_path / "cli" / "c.py").write_text("C = 1\n")
    (tmp_path / KERNEL_PACKAGES[1] / "__pycache__").mkdir()
    (tmp_path / KERNEL_PACKAGES[1] / "__pycache__" / "x.py").write_text("X = 1\n")
    assert sources_digest(str(tmp_path)) == first
    nested.write_text("B = 2\n")
    changed = sources_digest(str(tmp_path))
    assert changed != first
    nested.rename(nested.with_name("c.py"))
    assert sources_digest(str(tmp_path)) not in (first, changed)


def test_a_package_not_in_a_directory_keeps_the_kernels_own_stamps(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Imported from a zip (Spark's ``--py-files``), the sources cannot be listed: the digest
    is a constant and kernels keep numba's stamp of their own file, rather than failing."""
    import cleanerd._kernel as kernel_module  # noqa: PLC0415 (its process-wide digest)

    def unlistable(root: str) -> str:
        raise NotADirectoryError(root)

    monkeypatch.setattr(kernel_module, "_packages_seen", None)
    monkeypatch.setattr(kernel_module, "sources_digest", unlistable)
    assert kernel_module._packages_stamp() == "unlisted"


def test_kernel_modules_take_values_only_from_the_kernel_packages() -> None:
    """What a kernel module imports from cleanerd is in ``KERNEL_PACKAGES`` (or is the kernel
    machinery): a value from elsewhere could change without the kernels being compiled anew."""
    from cleanerd._kernel import KERNEL_PACKAGES  # noqa: PLC0415

    package = REPO / "cleanerd"
    allowed = (*(f"cleanerd.{name}" for name in KERNEL_PACKAGES), "cleanerd._kernel")
    wrong = []
    for path in sorted(package.rglob("*.py")):
        text = path.read_text()
        if (
            not re.search(r"^@kernel\(|= intrinsic\(", text, re.MULTILINE)
            or path.name == "_kernel.py"
        ):
            continue
        own = ".".join(path.relative_to(REPO).with_suffix("").parts)
        for name in re.findall(r"^from (cleanerd[\w.]*) import", text, re.MULTILINE):
            if name != own.rsplit(".", 1)[0] and not name.startswith(allowed):
                wrong.append(f"{path.relative_to(REPO)}: {name}")
    assert not wrong
