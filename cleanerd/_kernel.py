"""``kernel`` and ``intrinsic``: how every numba kernel (and LLVM helper) is made; loaded light.

A kernel compiles at its first call with a new signature, or loads that signature from numba's
cache dir (``cleanerd._jitcache``; ``cleanerd warmup`` fills it). Importing numba and preparing
its compiler cost more than the rest of a short command (``cleanerd verify``: numba's import
0.2 s of CPU, its compiler's set-up 0.2-0.3 s more, on the 2-core dev VM; bench/startup.py),
though a kernel loaded as machine code needs neither. So a kernel is loaded in one of three ways:

- **without numba**: ``kernel`` returns a :class:`Kernel`, which makes no numba object until
  one is needed. Whenever numba compiles a kernel's signature (or, in ``cleanerd warmup``,
  loads one from its cache; other commands never write a cache they only read), a copy of what
  running it needs is kept next to numba's cache (``LIGHT_DIR``): the machine code
  numba cached, the name of its Python entry point and the constants of its environments. A
  later process loads that machine code with llvmlite and numba's C runtime (``_helperlib``,
  ``_dynfunc``, ``_nrt_python``: C extensions, imported without the numba package) and calls
  it when the arguments' types are exactly those of a kept signature (:func:`_arg_key`, what
  numba's ``typeof`` says of arrays and scalars). Anything else (another type, a kernel never
  kept, a copy made by another numba, CPU or source file) goes to numba, as before. numba's own
  code still imports numba when it needs Python objects it pickled: a kernel that raises, or
  returns a new array (its class), imports it on the first such return;
- **numba with a light cache load**: numba's dispatcher, whose cache (:class:`_LightCache`)
  loads the cached machine code with only what running it needs, not numba's compiler set-up
  (it imports and registers the implementation of every Python and numpy feature it can
  compile, 90 modules);
- **numba's own**: a compile, or a numba whose internals differ from what the light load
  expects (``AttributeError``: its own full load, still correct).

Once numba is needed in a process every :class:`Kernel` and :class:`Intrinsic` becomes its numba
object in the modules that name it (``_use_numba``), so numba compiles kernels that call each
other as it always did (``inline="always"`` needs the callee to be numba's dispatcher).

What keeps the loads sound:

- what cached code links to is known without numba's registries: numba's C helpers, its
  runtime's C functions (``NRT_``) and Python's C API; numba links the rest of its runtime
  (``NRT_incref``...) into each kernel's own code, and a kernel's code carries the code of the
  kernels it calls, so loading one never loads another. Kernels use neither numpy's random nor
  Python's hash (symbols that come with numba's registries) nor ``parallel=True``;
- the checks stay numba's: a kept copy names the numba and llvmlite builds (their extension
  files' size and mtime), the CPU (name and features, numba's cache key) and the kernel's source
  file (size and mtime, what numba's index checks); any difference and the copy is not used.
"""

from __future__ import annotations

import builtins
import hashlib
import importlib
import importlib.util
import os
import pickle
import platform
import sys
import tempfile
import threading
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, Generic, Literal, TypeVar

import numpy as np

F = TypeVar("F", bound=Callable[..., Any])

LIGHT_DIR = "cleanerd-kernels"
"""The dir, in numba's cache dir (``NUMBA_CACHE_DIR``, else the ``__pycache__`` beside each
kernel's source, numba's own choice), of the kept copies: one file a kernel."""
_FORMAT = 1
# numba settings that change the machine code or how it runs: with any set, numba decides
_NUMBA_SETTINGS = ("NUMBA_DISABLE_JIT", "NUMBA_CPU_NAME", "NUMBA_CPU_FEATURES", "NUMBA_NRT_STATS")
# numba's C extensions a kernel's code calls into, by module name and file (numba's own layout)
_EXTENSIONS = {
    "numba._helperlib": "_helperlib",
    "numba._dynfunc": "_dynfunc",
    "numba.core.runtime._nrt_python": "core/runtime/_nrt_python",
}

# where the process's own symbols give what numba maps for itself elsewhere (C math functions
# on Windows, 32-bit helpers, s390x's libgcc): 64-bit x86 Linux
_LIGHT_PLATFORM = sys.platform.startswith("linux") and platform.machine() == "x86_64"

_LOCK = threading.RLock()
_KERNELS: list[Kernel[Any]] = []
_ON_NUMBA: list[Callable[[], None]] = []  # ``when_numba``'s callbacks, not yet run
_INTRINSICS: list[Intrinsic] = []
_numba_in_use = False
_keep_loads = False  # ``use_numba(keep_loaded=True)``: signatures numba loads are kept too


class Intrinsic:
    """``numba.extending.intrinsic(typing)``, made when numba is first needed."""

    def __init__(self, typing: Callable[..., Any]) -> None:
        self.typing = typing
        self.__name__ = typing.__name__
        self.__module__ = typing.__module__
        self.__doc__ = typing.__doc__
        self._numba: Any = None
        with _LOCK:
            _INTRINSICS.append(self)
            if _numba_in_use:
                self.numba()

    def numba(self) -> Any:
        """numba's intrinsic."""
        if self._numba is None:
            from numba.extending import intrinsic  # noqa: PLC0415 (numba only when needed)

            self._numba = intrinsic(self.typing)
        return self._numba

    def __call__(self, *args: Any) -> Any:  # as numba's: only kernels call it
        return self.numba()(*args)


def intrinsic(typing: Callable[..., Any]) -> Any:
    """``numba.extending.intrinsic``, without importing numba until a kernel compiles."""
    return Intrinsic(typing)


class Kernel(Generic[F]):
    """A kernel: calls its kept machine code without numba when it can, numba's dispatcher
    otherwise (made on first need, with :class:`_LightCache`)."""

    def __init__(self, func: F, nogil: bool, inline: str) -> None:
        self.py_func = func
        self.__name__ = func.__name__
        self.__qualname__ = func.__qualname__
        self.__module__ = func.__module__
        self.__doc__ = func.__doc__
        self._options = {"nogil": nogil, "inline": inline}
        self._dispatcher: Any = None
        self._light: dict[tuple[Any, ...], Any] | None = None
        # argument types as read in a call (dtype, ndim and flags of arrays, the type of others)
        # -> the kept signature they fit, or None; an int is an int64 when first seen (numba
        # would compile a uint64 signature for one past 2**63: it overflows here, as it would
        # in numba's int64 signature)
        self._seen: dict[tuple[Any, ...], Any] = {}
        with _LOCK:
            _KERNELS.append(self)
            if _numba_in_use:
                self._make()

    def _make(self) -> Any:
        if self._dispatcher is None:
            from numba import njit  # noqa: PLC0415 (numba only when needed)

            make: Any = njit
            dispatcher = make(**self._options)(self.py_func)
            # what numba's enable_caching() sets, with the light load
            dispatcher._cache = _LightCache(self.py_func)
            self._dispatcher = dispatcher
        return self._dispatcher

    @property
    def numba_dispatcher(self) -> Any:
        """numba's dispatcher if this process made it, else None (no numba was needed)."""
        return self._dispatcher

    @property
    def dispatcher(self) -> Any:
        """numba's dispatcher of this kernel (numba is set up for every kernel then)."""
        if self._dispatcher is None:
            _use_numba()
        return self._dispatcher

    def _call(self, *args: Any) -> Any:
        dispatcher = self._dispatcher
        if dispatcher is None:
            light = self._light
            if light is None:
                light = self._load_light()
            if light:
                # what decides the argument keys, read fast (the keys are a dict lookup away)
                seen = tuple(
                    [(a.dtype, a.ndim, a.flags.num) if type(a) is _ARRAY else type(a) for a in args]
                )
                entry = self._seen.get(seen, _NEW)
                if entry is _NEW:
                    entry = self._seen[seen] = _entry_for(light, tuple(map(_arg_key, args)))
                if entry is not None:
                    return entry(*args)
            dispatcher = self.dispatcher
        return dispatcher(*args)

    if TYPE_CHECKING:
        __call__: F  # the kernel's own signature, as numba's Dispatcher[F] gives it
    else:
        __call__ = _call

    def __getattr__(self, name: str) -> Any:  # numba's attributes: signatures, stats...
        if name.startswith("__") or name in ("_dispatcher", "_light", "_seen", "py_func"):
            raise AttributeError(name)
        return getattr(self.dispatcher, name)

    def __reduce__(self) -> tuple[Any, ...]:
        return (_named, (self.__module__, self.__qualname__))

    def light_signatures(self) -> list[tuple[Any, ...]]:
        """The argument keys (``_arg_key``) this process can call without numba."""
        return sorted(self._light or {}, key=repr)

    def _load_light(self) -> dict[tuple[Any, ...], Any]:
        with _LOCK:
            if self._light is None:
                try:
                    self._light = _load_kept(self.py_func)
                except Exception:  # an unreadable or foreign copy: numba decides
                    self._light = {}
            return self._light


def kernels() -> list[Kernel[Any]]:
    """Every kernel made in this process (modules name numba's dispatchers once numba is in
    use: ``Kernel.dispatcher``)."""
    with _LOCK:
        return list(_KERNELS)


def _named(module: str, qualname: str) -> Any:
    return getattr(importlib.import_module(module), qualname)


def kernel(
    *, nogil: bool = False, inline: Literal["never", "always"] = "never"
) -> Callable[[F], Kernel[F]]:
    """``numba.njit(cache=True, nogil=nogil, inline=inline)``, loaded light (module docstring).

    ``nogil``: the kernel lets go of the GIL (worker threads run kernels side by side);
    ``inline="always"``: a helper numba inlines into the kernels that call it."""

    def make(func: F) -> Kernel[F]:
        return Kernel(func, nogil, inline)

    return make


# --- numba in use: every kernel is numba's dispatcher where modules name it ---------------------


def use_numba(*, keep_loaded: bool = False) -> None:
    """From now on every kernel runs through numba. A signature numba compiles is kept (its
    cache changes anyway); one it only loads from its cache is kept with ``keep_loaded``
    (``cleanerd warmup``, which fills the cache): other commands never write a cache they only
    read (a read-only volume, a cache an image was built with)."""
    global _keep_loads  # noqa: PLW0603 (once a process: warmup)
    _keep_loads = _keep_loads or keep_loaded
    _use_numba()


def when_numba(callback: Callable[[], None]) -> Callable[[], None]:
    """Run ``callback`` once numba is in use (now, if it is); returns what cancels a callback
    not yet run. For numba's event listeners: installing one imports numba."""
    with _LOCK:
        if _numba_in_use:
            callback()
            return lambda: None
        _ON_NUMBA.append(callback)

    def cancel() -> None:
        with _LOCK:
            if callback in _ON_NUMBA:
                _ON_NUMBA.remove(callback)

    return cancel


def _use_numba() -> None:
    global _numba_in_use  # noqa: PLW0603 (set once a process)
    with _LOCK:
        if _numba_in_use:
            return
        from numba.core import event  # noqa: PLC0415 (numba only when needed)

        for intr in _INTRINSICS:
            intr.numba()
        for k in _KERNELS:
            k._make()
        _numba_in_use = True
        _swap_all()
        # a module imported later names its new kernels as Kernel objects: swapped before any
        # compile, which is when numba reads them
        register: Any = event.register
        register("numba:compile", _swap_listener())
        for callback in _ON_NUMBA:
            callback()


def _swap_all() -> None:
    """In every module that names a kernel or an intrinsic, the name now means numba's object."""
    with _LOCK:
        wanted = {k.__module__ for k in _KERNELS} | {i.__module__ for i in _INTRINSICS}
        for name, module in list(sys.modules.items()):
            if module is None or not (name in wanted or name.startswith("cleanerd.")):
                continue
            names = getattr(module, "__dict__", None)
            if not isinstance(names, dict):
                continue
            for attr, value in list(names.items()):
                if isinstance(value, Kernel):
                    names[attr] = value._make()
                elif isinstance(value, Intrinsic):
                    names[attr] = value.numba()


def _swap_listener() -> Any:
    """A numba event listener that makes every module name numba's objects before a compile."""
    from numba.core import event  # noqa: PLC0415 (numba only when needed)

    class Swap(event.Listener):
        def on_start(self, ev: Any) -> None:
            _swap_all()

        def on_end(self, ev: Any) -> None:
            pass

    return Swap()


# --- numba's dispatcher cache: light load, and the kept copies ----------------------------------


def _light_cache_class() -> type:
    from numba.core.caching import FunctionCache  # noqa: PLC0415 (numba only when needed)

    class LightCache(FunctionCache):
        """numba's per-kernel cache, minus the compiler's set-up before a load; it keeps a copy
        of each signature it saves (and, in warmup, loads) for :class:`Kernel`'s numba-free
        load. Its index is stamped with the kernel packages' sources too (``_packages_stamp``):
        numba's own stamp is the kernel's file alone."""

        def __init__(self, py_func: Any) -> None:
            super().__init__(py_func)  # type: ignore[no-untyped-call]
            try:
                own = self._cache_file._source_stamp
                self._cache_file._source_stamp = (own, _packages_stamp())
            except AttributeError:  # another numba's internals: its own stamp only
                pass

        def load_overload(self, sig: Any, target_context: Any) -> Any:
            internals = _light_internals(self)
            if internals is None:  # another numba's internals: its own (full) load
                return super().load_overload(sig, target_context)  # type: ignore[no-untyped-call]
            guard, enabled, index_key, cache_file, rebuild, initialize = internals
            initialize(target_context)  # safe to repeat: it runs once
            with guard():
                if not enabled:
                    return None
                data = cache_file.load(index_key(sig, target_context.codegen()))
                if data is None:
                    return None
                if _keep_loads:
                    _keep(self._py_func, data)
                return rebuild(target_context, data)

        def save_overload(self, sig: Any, data: Any) -> None:
            super().save_overload(sig, data)  # type: ignore[no-untyped-call]
            try:
                reduced = data._reduce()
            except Exception:  # nothing numba would cache either
                return
            _keep(self._py_func, reduced)

    return LightCache


_light_cache: type | None = None


def _light_internals(cache: Any) -> tuple[Any, ...] | None:
    """What the light load uses of numba's cache, None when this numba has other internals."""
    from numba.core.runtime import nrt  # noqa: PLC0415 (numba is loaded here)

    try:
        return (
            cache._guard_against_spurious_io_errors,
            cache._enabled,
            cache._index_key,
            cache._cache_file,
            cache._impl.rebuild,
            nrt.rtsys.initialize,
        )
    except AttributeError:
        return None


def _LightCache(func: Callable[..., Any]) -> Any:  # noqa: N802 (a class made on first use)
    global _light_cache  # noqa: PLW0603 (set once a process)
    if _light_cache is None:
        _light_cache = _light_cache_class()
    return _light_cache(func)


def _kept_path(func: Callable[..., Any]) -> Path | None:
    if any(os.environ.get(s) for s in _NUMBA_SETTINGS) or not _LIGHT_PLATFORM:
        return None
    source = func.__code__.co_filename
    # numba's own choice when no dir is set (``cleanerd._jitcache`` sets one unless the package
    # is writable): the ``__pycache__`` beside the source
    cache = os.environ.get("NUMBA_CACHE_DIR") or os.path.join(
        os.path.dirname(source), "__pycache__"
    )
    # the source file's path too, as numba's cache dirs: two installs may share a cache dir
    where = hashlib.sha256(os.fsencode(source)).hexdigest()[:16]
    return Path(cache) / LIGHT_DIR / f"{func.__module__}.{func.__qualname__}-{where}.pickle"


def _source_stamp(func: Callable[..., Any]) -> tuple[float, int, str]:
    st = os.stat(func.__code__.co_filename)
    return (st.st_mtime, st.st_size, _packages_stamp())


KERNEL_PACKAGES = ("compaction", "format", "storage", "topics")
"""The subpackages whose modules kernels are written in or take values from. A kernel's machine
code holds the code of the kernels it calls and the module constants it reads, frozen at
compile time, from files other than its own, which numba's cache does not watch (it stamps a
kernel with its own source file only). So every cached kernel is stamped with the contents of
all of these sources too: any change to one compiles the kernels anew.
``tests/project/test_kernel.py`` checks that every kernel module imports from these alone."""

_packages_seen: str | None = None


def _packages_stamp() -> str:
    """``sources_digest`` of this package, taken once a process (about 2 ms)."""
    global _packages_seen  # noqa: PLW0603 (set once a process)
    if _packages_seen is None:
        try:
            _packages_seen = sources_digest(os.path.dirname(os.path.abspath(__file__)))
        except OSError:  # not a dir of files (imported from a zip): the kernels' own stamps
            _packages_seen = "unlisted"
    return _packages_seen


def sources_digest(root: str) -> str:
    """A digest of every source file of ``KERNEL_PACKAGES`` under the package dir ``root``:
    their names and contents, as numba stamps a kernel's own file (a file's mtime is no guide:
    an image layer keeps it to the second, a checkout sets it anew)."""
    digest = hashlib.sha256()
    pending = [os.path.join(root, name) for name in KERNEL_PACKAGES]
    while pending:
        folder = pending.pop()
        with os.scandir(folder) as entries:
            for entry in sorted(entries, key=lambda e: e.name):
                if entry.is_dir() and entry.name != "__pycache__":
                    pending.append(entry.path)
                elif entry.name.endswith(".py"):
                    with open(entry.path, "rb") as source:
                        digest.update(os.path.relpath(entry.path, root).encode() + b"\0")
                        digest.update(source.read())
    return digest.hexdigest()[:24]


_builds_seen: tuple[Any, ...] | None = None


def _builds() -> tuple[Any, ...]:
    """numba's and llvmlite's builds (their extension files), the CPU and Python."""
    global _builds_seen  # noqa: PLW0603 (set once a process)
    if _builds_seen is None:
        _builds_seen = _find_builds()
    return _builds_seen


def _find_builds() -> tuple[Any, ...]:
    import llvmlite.binding as ll  # type: ignore[import-untyped]  # noqa: PLC0415

    files = [_extension_file(name) for name in _EXTENSIONS]
    files.append(ll.ffi.lib._name)
    stats = [(f, os.stat(f).st_size, os.stat(f).st_mtime_ns) for f in files]
    cpu = (ll.get_process_triple(), ll.get_host_cpu_name(), ll.get_host_cpu_features().flatten())
    return (_FORMAT, sys.implementation.cache_tag, tuple(stats), cpu)


def _extension_file(name: str) -> str:
    spec = importlib.util.find_spec("numba")
    if spec is None or spec.origin is None:
        raise ImportError("numba")
    base = Path(spec.origin).parent / _EXTENSIONS[name]
    found = sorted(base.parent.glob(base.name + ".*.so")) + sorted(
        base.parent.glob(base.name + ".*.pyd")
    )
    if not found:
        raise ImportError(name)
    return str(found[0])


def _type_key(ty: Any) -> Any:
    """The argument key (``_arg_key``) of a numba type, None when the light load takes none."""
    from numba.core import types  # noqa: PLC0415 (numba is loaded here)
    from numba.np import numpy_support  # noqa: PLC0415

    if isinstance(ty, types.Array):
        dtype = numpy_support.as_dtype(ty.dtype)
        if not ty.aligned or ty.layout not in "CFA" or dtype.kind not in "biuf":
            return None
        return ("a", dtype.name, ty.ndim, ty.layout, bool(ty.mutable))
    if isinstance(ty, types.Boolean | types.Integer | types.Float) and not isinstance(
        ty, types.Literal
    ):
        return ("s", str(ty))
    return None


def _keep(func: Callable[..., Any], reduced: Any) -> None:
    """Keep what :func:`_load_kept` needs of one cached signature (numba's ``_reduce`` tuple)."""
    path = _kept_path(func)
    if path is None:
        return
    try:
        libdata, fndesc, _env, signature, objectmode, lifted, _ann, reload_init, envs = reduced
        _name, kind, (object_code, _bitcode) = libdata
        key = tuple(_type_key(t) for t in signature.args)
        if objectmode or lifted or reload_init or kind != "object" or None in key:
            return
        env_list = [(e.env_name, list(e.consts)) for e in envs]
        for _, consts in env_list:
            pickle.loads(pickle.dumps(consts))  # plain Python and numpy values only
            if any(type(c).__module__.startswith("numba") for c in consts):
                return
        entry = {
            "object_code": bytes(object_code),
            "wrapper": fndesc.llvm_cpython_wrapper_name,
            "qualname": fndesc.qualname,
            "envs": env_list,
        }
        with _LOCK:
            kept = _read_kept(path, func) or {}
            if key in kept:
                return
            kept[key] = entry
            stamp = {"builds": _builds(), "source": _source_stamp(func), "entries": kept}
            path.parent.mkdir(parents=True, exist_ok=True)
            fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=path.name, suffix=".tmp")
            try:
                with os.fdopen(fd, "wb") as f:
                    pickle.dump(stamp, f, protocol=pickle.HIGHEST_PROTOCOL)
                os.replace(tmp, path)
            except BaseException:
                os.unlink(tmp)
                raise
    except Exception:  # keeping a copy is an optimisation: numba's cache is what counts
        return


def _read_kept(path: Path, func: Callable[..., Any]) -> dict[tuple[Any, ...], Any] | None:
    """The kept entries of ``func``, None when missing or made for another build or source."""
    try:
        with open(path, "rb") as f:
            kept = pickle.load(f)  # our own file, in the user's own cache dir
    except (OSError, EOFError, pickle.UnpicklingError):
        return None
    if not isinstance(kept, dict) or kept.get("source") != _source_stamp(func):
        return None
    if kept.get("builds") != _builds():
        return None
    entries = kept.get("entries")
    return entries if isinstance(entries, dict) else None


# --- the numba-free load -------------------------------------------------------------------------


class _Runtime:
    """llvmlite, a target machine, and numba's C runtime, set up once a process."""

    def __init__(self) -> None:
        import llvmlite.binding as ll  # noqa: PLC0415 (only when a kept kernel is called)

        ll.initialize_native_target()
        ll.initialize_native_asmprinter()
        ext = {name: _extension(name) for name in _EXTENSIONS}
        helperlib, dynfunc = ext["numba._helperlib"], ext["numba._dynfunc"]
        nrt = ext["numba.core.runtime._nrt_python"]
        # the symbols numba's target context registers (numba.core.base._load_global_helpers)
        ll.add_symbol("_Py_NoneStruct", id(None))
        for helpers in (helperlib.c_helpers, dynfunc.c_helpers):
            for py_name, address in helpers.items():
                ll.add_symbol("numba_" + py_name, address)
        for obj in vars(builtins).values():
            if isinstance(obj, type) and issubclass(obj, BaseException):
                ll.add_symbol(f"PyExc_{obj.__name__}", id(obj))
        # and numba's runtime (numba.core.runtime.nrt), but for its compiled part (linked into
        # every kernel's code)
        nrt.memsys_use_cpython_allocator()
        for py_name, address in nrt.c_helpers.items():
            ll.add_symbol(py_name if py_name.startswith("_") else "NRT_" + py_name, address)
        self.ll = ll
        self.dynfunc = dynfunc
        target = ll.Target.from_triple(ll.get_process_triple())
        reloc = "static" if target.name.startswith("x86") else "default"
        self.target = target
        self.tm_options = {
            "cpu": ll.get_host_cpu_name(),
            "features": ll.get_host_cpu_features().flatten(),
            "reloc": reloc,
            "codemodel": "jitdefault",
            "jit": True,
        }
        self.engines: list[Any] = []  # they own the loaded code: kept for the process

    def load(self, module: Any, entry: dict[str, Any]) -> Any:
        ll = self.ll
        tm = self.target.create_target_machine(**self.tm_options)
        engine = ll.create_mcjit_compiler(ll.parse_assembly(""), tm)
        engine.add_object_file(ll.ObjectFileRef.from_data(entry["object_code"]))
        engine.finalize_object()
        envs = []
        for env_name, consts in entry["envs"]:
            env = self.dynfunc.Environment(module.__dict__)
            env.consts[:] = consts
            address = engine.get_global_value_address(env_name)
            if not address:
                raise LookupError(env_name)
            import ctypes  # noqa: PLC0415

            (ctypes.c_void_p * 1).from_address(address)[0] = ctypes.c_void_p(id(env))
            envs.append(env)
        pointer = engine.get_function_address(entry["wrapper"])
        if not pointer:
            raise LookupError(entry["wrapper"])
        self.engines.append((engine, envs))
        name = entry["qualname"].split(".")[-1]
        doc = f"compiled wrapper for {entry['qualname']!r}"
        return self.dynfunc.make_function(module, name, doc, pointer, envs[0], (engine, envs))


def _extension(name: str) -> Any:
    """numba's C extension ``name``, without running numba's ``__init__``: it imports numba's
    compiler. The module is the one numba later imports (``sys.modules``)."""
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, _extension_file(name))
    if spec is None or spec.loader is None:
        raise ImportError(name)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    sys.modules[name] = module
    return module


_runtime: _Runtime | None = None


def _load_kept(func: Callable[..., Any]) -> dict[tuple[Any, ...], Any]:
    """The kept signatures of ``func`` as callables, loaded without numba."""
    global _runtime  # noqa: PLW0603 (set once a process)
    path = _kept_path(func)
    if path is None or not path.is_file():
        return {}
    kept = _read_kept(path, func)
    if not kept:
        return {}
    if _runtime is None:
        _runtime = _Runtime()
    module = sys.modules[func.__module__]
    loaded = {}
    for key, entry in kept.items():
        loaded[key] = _runtime.load(module, entry)
    return loaded


_NEW = object()
_ARRAYS: dict[tuple[Any, int, int], Any] = {}  # (dtype, ndim, flags) -> key: numpy computes
# a dtype's name on each call (10 us), and a kernel call is a few us


def _dtype_name(dtype: Any) -> str | None:
    return str(dtype.name) if dtype.isnative and dtype.kind in "biuf" else None


def _array_key(value: Any) -> Any:
    flags = value.flags
    dtype = _dtype_name(value.dtype)
    if dtype is None or not flags.aligned:
        return None
    layout = "C" if flags.c_contiguous else "F" if flags.f_contiguous else "A"
    return ("a", dtype, value.ndim, layout, bool(flags.writeable))


_ARRAY = np.ndarray
_INT64, _UINT64, _BOOL, _FLOAT64 = ("s", "int64"), ("s", "uint64"), ("s", "bool"), ("s", "float64")
_NUMPY_SCALARS = (np.bool_, np.integer, np.floating)


def _entry_for(light: dict[tuple[Any, ...], Any], keys: tuple[Any, ...]) -> Any:
    """The kept entry for arguments of these keys: the one compiled for exactly them, else one
    whose any-layout ("A") arrays take the contiguous ones given (None: numba decides).

    numpy calls an array of one element (or none) contiguous whatever its strides, so a column
    of a batch matrix holding one batch is a "C" array where the same column of two batches is
    "A": without this, a chunk of one batch had numba compile a kernel anew (and import numba)
    in the middle of a cleaning. Code compiled for "A" reads the strides, so it takes any
    layout."""
    entry = light.get(keys)
    if entry is not None or None in keys:
        return entry
    for kept, found in light.items():
        if len(kept) == len(keys) and all(map(_takes, kept, keys)):
            return found
    return None


def _takes(kept: Any, given: Any) -> bool:
    """Whether code compiled for the argument key ``kept`` takes an argument of key ``given``."""
    if kept == given:
        return True
    return (
        type(kept) is tuple
        and type(given) is tuple
        and len(kept) == len(given) == 5
        and kept[0] == given[0] == "a"
        and kept[3] == "A"
        and (kept[1], kept[2], kept[4]) == (given[1], given[2], given[4])
    )


def _arg_key(value: Any) -> Any:
    """What numba's ``typeof`` says of an argument, as :func:`_type_key` writes it; None for
    values the light load does not take (numba decides: subclasses such as an ``IntEnum`` are
    types of their own to numba)."""
    kind = type(value)
    if kind is int:
        if -(2**63) <= value < 2**63:
            return _INT64
        return _UINT64 if 0 <= value < 2**64 else None
    if kind is np.ndarray:
        spec = (value.dtype, value.ndim, value.flags.num)
        try:
            return _ARRAYS[spec]
        except KeyError:
            key = _ARRAYS[spec] = _array_key(value)
            return key
    if kind is bool:
        return _BOOL
    if kind is float:
        return _FLOAT64
    if isinstance(value, _NUMPY_SCALARS) and type(value).__module__ == "numpy":
        return ("s", _dtype_name(value.dtype))
    return None
