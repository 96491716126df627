"""A worker's own process for its cleanings, so N workers use N cores and none waits on the GIL.

With ``cleanerd.cleaner.processes`` on (the default) each worker coroutine owns one process: it
starts it, hands it one cleaning at a time over a pipe, awaits the answer on the event loop
(the pipe's and the process's file descriptors, no thread), and closes it when the worker
retires or the daemon stops. The process keeps its ``CleanerSlot`` (its offset map) between
cleanings, as a worker's thread does. It is spawned, not forked: the daemon has threads and an
event loop that a fork would copy half-way.

- Abort: one message on the process's pipe, sent from the event loop (a pause, a stop); the
  cleaner looks for it before every chunk, as a thread reads its event, and a throttle sleep
  waits on the pipe so the message ends it. A pipe rather than a process-shared event: setting
  such an event waits for its sleepers to wake, so a process stopped or killed in a throttle
  sleep would hang the event loop; a message of a few bytes is sent once a cleaning and never
  waits.
- The daemon's death: on Linux the process asks the kernel for SIGKILL when the thread that
  started it (the event loop's) ends (``PR_SET_PDEATHSIG``), so an orphan never cleans beside a
  new daemon; elsewhere the end of its pipe aborts its cleaning at the next chunk. Either is safe by
  the swap protocol, as any crash is.
- Signals: the process ignores SIGINT and SIGTERM (a terminal's Ctrl-C and systemd's stop reach
  every process of the group): the daemon stops a cleaning through its abort signal, and kills a
  process that has not stopped when its shutdown timeout ends.
- Throttle: the daemon's one throttler, made with shared state, paces every process together.
- Death: a process that dies (the OOM killer, a crash in a kernel) fails the cleaning it ran, as
  the partition's failure naming the exit status; its worker starts and warms a new one before
  it takes another log.
- Start: the process loads the kernels first (``warm_up``: the daemon's own kernel load, done
  again in the process, whose kernels are its own) and then says ``READY``; its worker takes no
  log before that, so a log never waits behind a warm-up while another worker is free.
- Results and errors cross the pipe pickled; cleanerd's errors keep their file and position. An
  error that cannot be pickled arrives as a ``RuntimeError`` with its type and message.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import ctypes
import multiprocessing
import pickle
import signal
import sys
from collections.abc import Callable
from dataclasses import dataclass
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

from cleanerd._jitcache import configure_numba_cache
from cleanerd.compaction import Throttler, decompression_threads, usable_cores
from cleanerd.service._clean_job import CleanerSlot, JobResult, run_clean
from cleanerd.topics import TopicSettings

PROCESS_NAME = "cleanerd-clean"
"""The name each cleaning process gives itself (``multiprocessing``'s, seen in its errors)."""


EXIT_TIMEOUT_S = 10.0
"""How long a worker waits for its idle process to exit before it kills it (a stop of the daemon
with a cleaning still running is bounded by ``cleanerd.shutdown.timeout.ms`` instead)."""


ABORT = "abort"
"""The one message the daemon sends a process while it cleans."""
READY = "ready"
"""What a process says once it has warmed up, before any answer."""


class CleaningProcessDiedError(Exception):
    """The process running a cleaning ended before it answered (killed, or crashed)."""


@dataclass(frozen=True)
class CleaningJob:
    """One cleaning as the worker hands it to its process (``run_clean``'s arguments)."""

    directory: Path
    settings: TopicSettings
    map_bytes: int
    load_factor: float
    now_ms: int


def helper_threads(workers: int, cores: int | None = None) -> int:
    """Decompression helper threads of each cleaning process: compaction's rule for one
    cleaning on this process's share of the cores (one helper when a core is left for it)."""
    if cores is None:
        cores = usable_cores()
    return decompression_threads(1, cores // max(workers, 1))


class AbortSignal:
    """A cleaning's abort signal as the daemon holds it: set once, it sends ``ABORT`` to the
    process running the cleaning (or, set before the cleaning starts, right after its job)."""

    def __init__(self) -> None:
        self._set = False
        self._conn: Connection | None = None

    def begin(self) -> None:
        """A new cleaning: not set."""
        self._set, self._conn = False, None

    def running_on(self, conn: Connection | None) -> None:
        """The cleaning is running in the process at the end of ``conn`` (None: it ended)."""
        self._conn = conn
        if conn is not None and self._set:
            self._send()

    def set(self) -> None:
        if not self._set:
            self._set = True
            self._send()

    def is_set(self) -> bool:
        return self._set

    def _send(self) -> None:
        if self._conn is None:
            return
        with contextlib.suppress(OSError):  # a dead process: its cleaning ends without it
            self._conn.send(ABORT)


class CleaningProcess:
    """One worker's cleaning process, started on first use and again after it died."""

    def __init__(
        self, throttler: Throttler, helpers: int, warm_up: Callable[[], object] | None = None
    ) -> None:
        """``warm_up``: run in the process before its first job (picklable)."""
        self._context = multiprocessing.get_context("spawn")
        self.abort = AbortSignal()
        self._throttler = throttler
        self._helpers = helpers
        self._warm_up = warm_up
        self._process: Any = None  # multiprocessing's SpawnProcess
        self._conn: Connection | None = None

    @property
    def pid(self) -> int | None:
        return None if self._process is None else self._process.pid

    @property
    def running(self) -> bool:
        """The process is there (False after it died, until ``start``)."""
        return self._process is not None and self._process.is_alive()

    async def start(self) -> tuple[Any, Connection]:
        """The process and its pipe: the running one, or a new one once it is warm (its
        death meanwhile: ``CleaningProcessDiedError``)."""
        process, conn = self._process, self._conn
        if process is not None and conn is not None and process.is_alive():
            return process, conn
        self._drop()
        ours, theirs = self._context.Pipe()
        process = self._context.Process(
            target=_serve,
            args=(theirs, self._throttler, self._helpers, self._warm_up),
            name=PROCESS_NAME,
            daemon=True,
        )
        process.start()
        theirs.close()
        self._process, self._conn = process, ours
        await self._answer(process, ours)  # READY
        return process, ours

    async def _answer(self, process: Any, conn: Connection) -> Any:
        """The process's next message; its death instead: ``CleaningProcessDiedError``."""
        await _readable(conn.fileno(), process.sentinel)
        try:
            return conn.recv()  # readable: a message, or the end of a dead process's pipe
        except (EOFError, OSError):
            process.join()
            self._drop()
            raise CleaningProcessDiedError(
                f"the cleaning process (pid {process.pid}) ended before it answered: "
                f"{_exit_status(process.exitcode)}"
            ) from None

    async def clean(self, job: CleaningJob) -> JobResult:
        """Run ``job`` in the process; its error is raised here, a death as
        ``CleaningProcessDiedError``. The caller begins and sets ``abort``."""
        process, conn = await self.start()
        conn.send(job)
        self.abort.running_on(conn)
        try:
            ok, value = await self._answer(process, conn)
        finally:
            self.abort.running_on(None)
        if not ok:
            raise value
        result: JobResult = value
        return result

    def _drop(self) -> None:
        if self._conn is not None:
            self._conn.close()
        self._process = self._conn = None

    async def close(self, timeout_s: float) -> bool:
        """End the process: it exits once its pipe closes (after a running cleaning, which
        the caller has aborted); killed if still running after ``timeout_s``. False then."""
        process = self._process
        self._drop()
        if process is None:
            return True
        try:
            await asyncio.wait_for(_readable(process.sentinel), max(timeout_s, 0.0))
        except TimeoutError:
            process.kill()
            process.join()
            return False
        process.join()
        return True

    def kill(self) -> None:
        """SIGKILL the process now (shutdown timed out): the swap protocol makes that safe."""
        if self._process is not None and self._process.is_alive():
            self._process.kill()


async def _readable(*fds: int) -> None:
    """Wait until one of ``fds`` is readable (data, end of file, or a process's exit)."""
    loop = asyncio.get_running_loop()
    ready = loop.create_future()

    def wake() -> None:
        if not ready.done():
            ready.set_result(None)

    for fd in fds:
        loop.add_reader(fd, wake)
    try:
        await ready
    finally:
        for fd in fds:
            loop.remove_reader(fd)


def _exit_status(code: int | None) -> str:
    if code is not None and code < 0:
        try:
            name = signal.Signals(-code).name
        except ValueError:
            name = f"signal {-code}"
        hint = " (the kernel's OOM killer sends it)" if name == "SIGKILL" else ""
        return f"killed by {name}{hint}"
    return f"exit code {code}"


class _Aborted:
    """The abort signal as a cleaning process sees it: ``ABORT`` (or the end of the daemon's
    pipe) waiting on its pipe. Also the throttle's stop, whose sleep it ends."""

    def __init__(self, conn: Connection) -> None:
        self._conn = conn
        self.seen = False

    def is_set(self) -> bool:
        return self.wait(0.0)

    def wait(self, timeout: float | None = None) -> bool:
        if not self.seen and self._conn.poll(timeout):
            try:
                self.seen = self._conn.recv() == ABORT
            except (EOFError, OSError):  # the daemon is gone
                self.seen = True
        return self.seen


def _serve(
    conn: Connection,
    throttler: Throttler,
    helpers: int,
    warm_up: Callable[[], object] | None,
) -> None:
    """The process's loop: one cleaning per job, its result or error back, until the pipe
    closes."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    _die_with_parent()
    configure_numba_cache()  # the daemon's choice arrives in the environment; this checks it
    if warm_up is not None:
        with contextlib.suppress(Exception):  # the daemon reported its own load; a cleaning
            warm_up()  # compiles what it calls all the same
    try:
        conn.send(READY)
    except OSError:
        return
    pool = (
        concurrent.futures.ThreadPoolExecutor(helpers, thread_name_prefix="cleanerd-decompress")
        if helpers
        else None
    )
    slot = CleanerSlot(pool)
    while True:
        try:
            job = conn.recv()
        except (EOFError, OSError):
            return
        if job == ABORT:  # sent as the last cleaning ended: it was for that one
            continue
        aborted = _Aborted(conn)
        throttler.stop_on(aborted)
        answer: tuple[bool, object]
        try:
            answer = (True, _run(job, slot, throttler, aborted.is_set))
        except Exception as e:  # the worker decides what an error means
            answer = (False, e)
        try:
            _send(conn, answer)
        except (BrokenPipeError, OSError):
            return


PR_SET_PDEATHSIG = 1
"""``prctl`` option: the signal this process gets when its parent thread ends (Linux)."""


def _die_with_parent() -> None:
    """Ask Linux for SIGKILL when the daemon ends (elsewhere the pipe's end aborts)."""
    if not sys.platform.startswith("linux"):
        return
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)


def _run(job: CleaningJob, slot: CleanerSlot, throttler: Throttler, stop: Any) -> JobResult:
    return run_clean(
        job.directory,
        job.settings,
        slot,
        map_bytes=job.map_bytes,
        load_factor=job.load_factor,
        throttler=throttler,
        now_ms=job.now_ms,
        abort_check=stop,
    )


def _send(conn: Connection, answer: tuple[bool, object]) -> None:
    """Send ``answer``; an error that does not pickle goes as a ``RuntimeError`` naming it."""
    try:
        conn.send(answer)
    except (pickle.PicklingError, TypeError, AttributeError):
        error = answer[1]
        conn.send((False, RuntimeError(f"{type(error).__name__}: {error}")))
