"""``cleanerd run``: the daemon's lifecycle around the manager and the workers.

Start: install the signal handlers (first, so a stop at any moment of the start is orderly), lock
every log dir (Kafka's ``.lock``), read the pauses recorded there (``storage``: a bad file stops
the start), survey the partitions and apply those pauses before anything can be grabbed, bind the
HTTP port, start the manager loop, and load the kernels (``_kernels``); once they are loaded the
workers start (so no cleaning waits for a kernel to compile, and the first ones meet their
deadlines) and the daemon is ready: it tells systemd READY and ``/readyz`` answers 200. A failed
load starts the workers all the same, unready. A stop during the start skips what is left of it
and exits 0.

Run: one ``asyncio.TaskGroup`` owns the manager loop, the workers, the systemd watchdog and the
HTTP server, so every task has a parent that awaits it; each catches its own errors (a crashed
worker is restarted, a crashed manager loop stops the daemon with exit 1), and only shutdown
ends the group. Cleanings run in their own ``log.cleaner.threads`` threads, surveys and HTTP
file reads in a few others (``service._threads``); both pools are closed within the shutdown
timeout.

The manager loop rescans every ``log.cleaner.backoff.ms``, sooner when a log falls due
(``CleanerManager.next_wake_ms``: a deadline minus the expected cleaning time), after an admin
request, or when a worker runs out of work after cleanings (not after each cleaning: a survey
holds the GIL for tens of microseconds per partition, which the workers need); it rolls active
segments at their deadline minus the expected cleaning time, applies retention to
``compact,delete`` logs, wakes the workers,
and records each log dir's pauses when they changed (a partition gone takes its pause with it);
an admin pause or resume answers once its record is written. Signals: SIGTERM/SIGINT stop
(abort the running cleanings at the next batch boundary, wait for them up to the shutdown
timeout, exit 0); SIGHUP reloads the config and applies what can change at run time, keeping the
old config when the new one is invalid.
"""

from __future__ import annotations

import asyncio
import dataclasses
import functools
import gc
import os
import signal
import ssl
import sys
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from types import FrameType
from typing import Any, NoReturn

from cleanerd.compaction import CleaningAbortedError, Throttler
from cleanerd.config import ConfigError, LoadedConfig, TlsError, join_listen, load_chain
from cleanerd.format import snappy_fallback_reason
from cleanerd.scheduling import (
    CleanerManager,
    CleaningTotals,
    Grab,
    PartitionStatus,
    RetryPolicy,
    Survey,
)
from cleanerd.service import _kernels as kernels_module
from cleanerd.service._announce import log_listening, log_ready, status_line
from cleanerd.service._budget import DedupeBudget
from cleanerd.service._clean_job import JobResult
from cleanerd.service._http import Access, HttpServer, start_http
from cleanerd.service._kernels import load_kernels
from cleanerd.service._lateness import DeadlineWatch
from cleanerd.service._logging import get_logger
from cleanerd.service._maintenance import Maintenance
from cleanerd.service._metrics import DaemonMetrics
from cleanerd.service._reload import compare_reload
from cleanerd.service._spark_engine import SparkEngine
from cleanerd.service._status import DaemonStatus
from cleanerd.service._systemd import SystemdNotifier
from cleanerd.service._threads import SERVICE_THREADS, ThreadPool
from cleanerd.service._workers import PoolSettings, WorkerPool
from cleanerd.storage import (
    LogDir,
    StorageError,
    TopicPartition,
    read_pauses,
    wall_clock_ms,
    write_pauses,
)

log = get_logger("cleanerd.daemon")

KERNELS_LOADING, KERNELS_LOADED = "loading", "loaded"

MIN_WAIT_S = 0.1
"""The manager loop waits at least this long between surveys when waking for a deadline, so
many partitions falling due one after the other cost a survey per tenth of a second at most
(the lead's margin covers the delay)."""

STALL_FACTOR = 3
"""``/healthz`` fails when the manager loop has not finished a cycle in this many backoffs
(plus a minute for a slow survey)."""


_SIGNALS = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)
SignalHandler = Callable[[int, FrameType | None], Any] | int | signal.Handlers | None


class StartupError(Exception):
    """The daemon cannot start (a log dir is missing or locked, the port is taken)."""


def _retry(loaded: LoadedConfig) -> RetryPolicy:
    c = loaded.config
    return RetryPolicy(c.retry_attempts, c.retry_backoff_ms, c.retry_backoff_max_ms)


class Daemon:
    """One running cleanerd; also the admin API the HTTP server calls."""

    def __init__(
        self,
        loaded: LoadedConfig,
        reload: Callable[[], LoadedConfig],
        *,
        clock_ms: Callable[[], int] = wall_clock_ms,
        notifier: SystemdNotifier | None = None,
        held: Sequence[LogDir] = (),
    ) -> None:
        """``held``: log dir locks the caller already holds (``demo`` locks its dir before
        preparing it); the daemon uses them as they are and leaves them to the caller."""
        self.loaded = loaded
        self._held = tuple(held)
        self._reload_config = reload
        self.clock_ms = clock_ms
        self.notifier = notifier or SystemdNotifier.from_env()
        c = loaded.config
        self.manager = CleanerManager(
            c.log_dirs,
            c.topic_settings,
            load_factor=c.load_factor,
            budget_bytes=c.dedupe_buffer_size,
            clock_ms=clock_ms,
            retry=_retry(loaded),
            workers=max(c.threads, 1),
        )
        self.budget = DedupeBudget(c.dedupe_buffer_size)
        self._abort = threading.Event()  # set at shutdown: a throttled cleaning stops sleeping
        # shared: it paces the workers' cleaning processes too (service._processes)
        self.throttler = Throttler(c.io_max_bytes_per_second, stop=self._abort, shared=True)
        self.deadlines = DeadlineWatch()  # outlives reloads: its counts are counters
        self.metrics = DaemonMetrics(self.status)
        self.service = ThreadPool("cleanerd-service", SERVICE_THREADS)  # surveys, HTTP reads
        self.maintenance = Maintenance(self.manager, clock_ms, self.service.submit)
        self.spark = SparkEngine.of(c)  # None: every partition is cleaned locally
        self.pool: WorkerPool | None = None
        self.http: HttpServer | None = None
        self._tls: ssl.SSLContext | None = None  # the HTTP port's, when TLS is on
        self._http_bound = asyncio.Event()  # set once self.http listens
        self.ready = False  # /readyz: surveyed, workers started, kernels loaded, not stopping
        self.surveyed = False  # the first survey is applied
        self.kernels = KERNELS_LOADING  # or KERNELS_LOADED, or "failed: <error>"
        self.stopping = False
        self._pauses_lock = asyncio.Lock()  # one pause record write at a time
        self._recorded: dict[Path, dict[TopicPartition, int]] = {}  # pauses as on disk
        self._record_error: str | None = None  # the last failed record, said once
        self.last_cycle = time.monotonic()
        self._stop = asyncio.Event()
        self._rescan = asyncio.Event()
        self._locks: list[LogDir] = []
        self._previous_handlers: dict[int, SignalHandler] = {}
        self._manager_running = False
        self._manager_crashed = False
        self._frozen = False  # gc.freeze() at ready

    # --- lifecycle ----------------------------------------------------------------------------
    async def run(self) -> int:
        """Run until stopped; returns the exit code (0 after a clean stop)."""
        c = self.loaded.config
        self._install_signals()
        try:
            self._lock_log_dirs(c.log_dirs)
            await self._restore_pauses()
            survey = await self._starting(self.service.submit(self.manager.scan))
            if survey is None:
                return self._stopped_early()
            self.manager.apply(survey)  # the restored pauses apply here, before any grab
            self.deadlines.surveyed(survey, self.manager.live_statuses(), self.clock_ms())
            self.surveyed = True
            await self._record_pauses_logged()  # a pause of a partition not found goes
            if c.http_host is not None:
                await self._start_http()
            if self._stop.is_set():
                return self._stopped_early()
            try:
                return await self._serve()
            except ExceptionGroup as failed:  # a task's own error handling failed: stop, say so
                for error in failed.exceptions:
                    log.error("a daemon task failed", error=repr(error), exc_info=error)
                return 1
        finally:
            if self.http is not None:
                await self.http.close()
            # closed already after a clean stop; after a failed task, the threads end here
            if self.pool is not None:
                await self.pool.threads.close(self._timeout_s)
            await self.service.close(self._timeout_s)
            for lock in self._locks:
                lock.unlock()
            self._restore_signals()
            if self._frozen:  # a process running daemons in turn (the tests) collects again
                gc.unfreeze()
                self._frozen = False

    @property
    def _timeout_s(self) -> float:
        return self.loaded.config.shutdown_timeout_ms / 1000

    async def _serve(self) -> int:
        """The running daemon: one task group owns the manager loop, the workers, the watchdog
        and the HTTP server. The body waits for a stop and shuts down; the group then awaits
        every task it owns, so none outlives ``run``."""
        async with asyncio.TaskGroup() as group:
            stopped = asyncio.Event()
            if self.http is not None:
                group.create_task(self._serve_http(self.http, stopped), name="http")
            self._manager_running = True  # from now on, for /healthz, until the loop ends
            manager = group.create_task(self._manager(), name="manager")
            watchdog = group.create_task(self.notifier.run_watchdog(), name="watchdog")
            kernels = group.create_task(self._load_kernels(group), name="kernels")
            await self._stop.wait()
            deadline = time.monotonic() + self._timeout_s
            await self._shutdown(manager, deadline)
            watchdog.cancel()
            kernels.cancel()  # its thread stops at its abort check; the pool's close waits
            stopped.set()
        if not await self.service.close(deadline - time.monotonic()):
            log.error("shutdown timeout: a survey or the kernel load did not end in time; exiting")
            self._exit_now()
        log.info("stopped", cleanings=self._totals().cleanings)
        return 1 if self._manager_crashed else 0

    async def _load_kernels(self, group: asyncio.TaskGroup) -> None:
        """Load the kernels in a service thread, then start the workers and be ready: the
        ``cleanerd ready`` line, READY=1 to systemd, 200 from ``/readyz``. A failed load is
        logged and leaves the daemon unready, ``/readyz`` saying why; its workers start all the
        same, their cleanings compiling what they call. With cleanings in processes, the kernels
        are loaded once every worker's process has loaded its own."""
        try:
            log_dirs = self.loaded.config.log_dirs
            load = await self.service.submit(load_kernels, None, self._abort.is_set, log_dirs)
        except CleaningAbortedError:
            return  # stopping
        except Exception as e:
            self.kernels = f"failed: {e!r}"
            log.error("loading the kernels failed; not ready", error=repr(e), exc_info=e)
            self._start_workers(group)
            return
        self._start_workers(group)
        if self.pool is not None:
            await self.pool.warmed()
        self.kernels = KERNELS_LOADED
        if (why := snappy_fallback_reason()) is not None:
            log.warning("snappy batches are not written with Kafka's bytes", reason=why)
        log.info(
            "kernels loaded",
            seconds=round(load.seconds, 3),
            compiled=load.compiled,
            compile_seconds=round(load.compile_seconds, 3),
        )
        if self.stopping:
            return
        self.ready = True
        # What the start made (modules, kernels, the first survey) lives as long as the daemon:
        # out of the collector's reach, a full collection no longer walks it every few surveys
        # (pauses of hundreds of ms with thousands of partitions, the GIL held)
        gc.freeze()
        self._frozen = True
        c = self.loaded.config
        log_ready(c, self.manager.live_statuses(), self.http.port if self.http else None)
        self.notifier.ready(self._status_line())

    def _start_workers(self, group: asyncio.TaskGroup) -> None:
        """The worker pool, as tasks of ``group``; none once stopping."""
        if self.stopping:
            return
        self.pool = WorkerPool(
            self.manager,
            self.budget,
            self.throttler,
            PoolSettings.of(self.loaded.config),
            group=group,
            clock_ms=self.clock_ms,
            on_cleaned=self._cleaned,
            spark=self.spark,
            service=self.service.submit,
            # the function itself, not this module's name for it: it goes to each process
            warm_up=functools.partial(
                kernels_module.load_kernels, log_dirs=tuple(self.loaded.config.log_dirs)
            ),
        )
        self.pool.resize(self.pool.settings.threads)

    async def _serve_http(self, http: HttpServer, stopped: asyncio.Event) -> None:
        """Keep the HTTP port open until the daemon has stopped (``/healthz`` answers
        "stopping" meanwhile), then close it."""
        try:
            await stopped.wait()
        finally:
            await http.close()

    async def _starting(self, survey: asyncio.Future[Survey]) -> Survey | None:
        """The start-up survey, or None when a stop came first. The survey runs in a thread,
        which cannot be interrupted: it gets the shutdown timeout to end, then exit 1."""
        async with asyncio.TaskGroup() as group:
            stop_wait = group.create_task(self._stop.wait())
            first: set[asyncio.Future[Any]] = {survey, stop_wait}
            await asyncio.wait(first, return_when=asyncio.FIRST_COMPLETED)
            stop_wait.cancel()
        if not self._stop.is_set():
            return survey.result()
        timeout = self._timeout_s
        _, pending = await asyncio.wait({survey}, timeout=timeout)
        if pending:
            log.error("shutdown timeout: the start-up survey did not end", timeout_s=timeout)
            self._exit_now()
        if survey.exception() is not None:  # stopping anyway: say it, do not raise it
            log.warning("start-up survey failed while stopping", error=repr(survey.exception()))
        return None

    def _stopped_early(self) -> int:
        log.info("stopped before start-up finished")
        self.notifier.stopping()
        return 0

    async def _start_http(self) -> None:
        c = self.loaded.config
        assert c.http_host is not None
        try:
            self._tls = c.server_tls()  # read now: the files may have changed since the check
        except TlsError as e:
            raise StartupError(f"cannot serve TLS (cleanerd.http.tls.*): {e}") from None
        try:
            self.http = await start_http(
                self,
                self.metrics,
                c.http_host,
                c.http_port,
                self._access,
                self.service.submit,
                tls=self._tls,
            )
        except OSError as e:
            raise StartupError(
                f"cannot listen on {c.http_host}:{c.http_port} "
                f"(cleanerd.http.listen): {e.strerror or e}"
            ) from None
        self._http_bound.set()
        log_listening(c)

    @property
    def bound_url(self) -> str | None:
        """``http://host:port`` (``https`` with TLS) as bound (port 0 resolved); None until
        bound, or when off."""
        if self.http is None:
            return None
        scheme = "http" if self._tls is None else "https"
        return f"{scheme}://{join_listen(self.http.host, self.http.port)}"

    async def http_url(self) -> str | None:
        """``bound_url`` once the port is bound (early in start-up, before the daemon is
        ready); None at once when ``cleanerd.http.listen`` is off."""
        if self.loaded.config.http_host is None:
            return None
        await self._http_bound.wait()
        return self.bound_url

    def _access(self) -> Access:
        """The HTTP access rules of the current config (a reload applies at the next request)."""
        c = self.loaded.config
        return Access(c.admin_token, c.status_public)

    def request_stop(self, reason: str = "requested") -> None:
        if not self._stop.is_set():
            log.info("stopping", reason=reason)
            self._stop.set()

    def _lock_log_dirs(self, dirs: tuple[Path, ...]) -> None:
        source = self.loaded.origins.get("log.dirs", "default")
        for path in dirs:
            if not path.exists():
                raise StartupError(
                    f"log dir {path} does not exist (log.dirs from {source}); "
                    "create it or set log.dirs"
                )
            if not path.is_dir():
                raise StartupError(
                    f"log dir {path} is not a directory (log.dirs from {source}); "
                    "set log.dirs to a directory"
                )
            if any(h.is_locked and h.path.resolve() == path.resolve() for h in self._held):
                continue
            lock = LogDir(path)
            # StorageError names the holder's PID; writers under the writer contract (gen)
            # may append beside the daemon, and the writers' lock tells them so
            lock.lock(welcome_writers=True)
            self._locks.append(lock)

    def _install_signals(self) -> None:
        loop = asyncio.get_running_loop()
        self._previous_handlers = {sig: signal.getsignal(sig) for sig in _SIGNALS}
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, self.request_stop, signal.Signals(sig).name)
        loop.add_signal_handler(signal.SIGHUP, self.reload)

    def _restore_signals(self) -> None:
        """Put back the handlers found at start (the loop would reset them to the default,
        under which a late SIGTERM ends the process by the signal instead of the exit code)."""
        loop = asyncio.get_running_loop()
        for sig, previous in self._previous_handlers.items():
            loop.remove_signal_handler(sig)
            if previous is not None:
                signal.signal(sig, previous)

    async def _shutdown(self, manager: asyncio.Task[None], deadline: float) -> None:
        """Stop the manager loop, abort the cleanings and wait for the workers and their
        threads, then the Spark session, by ``deadline``; past it, exit 1 at once."""
        self.stopping = True
        self.ready = False
        self._abort.set()
        self.notifier.stopping()
        manager.cancel()
        await asyncio.wait({manager})  # it ends at its next await (a survey thread runs on)
        timeout = self._timeout_s
        left = max(deadline - time.monotonic(), 0.0)
        finished = await self.pool.stop(left) if self.pool is not None else True
        if finished and self.spark is not None:  # what is left of the timeout
            await self.spark.stop(max(deadline - time.monotonic(), 1.0), self.service.submit)
        if finished:
            return
        # A thread cannot be killed, and the interpreter would wait for it at exit: leave now.
        # Its .cleaned file (if any) is removed by swap recovery on the next open.
        log.error("shutdown timeout: a cleaning did not stop in time; exiting", timeout_s=timeout)
        self._exit_now()

    def _exit_now(self) -> NoReturn:
        """Leave with exit 1 without waiting for threads (the interpreter would wait at exit)."""
        for lock in self._locks:
            lock.unlock()
        sys.stderr.flush()
        os._exit(1)

    # --- the manager loop ---------------------------------------------------------------------
    async def _manager(self) -> None:
        """The manager loop, whose crash is logged and stops the daemon (exit 1): without
        surveys no worker would find work again."""
        try:
            await self._manager_loop()
        except Exception as e:
            self._manager_crashed = True
            log.error("manager loop crashed", error=repr(e), exc_info=e)
            self.request_stop("manager loop crashed")
        finally:
            self._manager_running = False

    async def _manager_loop(self) -> None:
        while True:
            if self.pool is not None:
                self.pool.survey_started()
            survey = await self.service.submit(self.manager.scan)
            self.manager.apply(survey)
            self.deadlines.surveyed(survey, self.manager.live_statuses(), self.clock_ms())
            await self._record_pauses_logged()
            changed = await self.maintenance.run()
            self.last_cycle = time.monotonic()
            if self.pool is not None:
                self.pool.wake()
            self.notifier.status(self._status_line())
            if changed:
                continue  # a rolled segment is cleanable now: plan it at once
            backoff = self.loaded.config.backoff_ms / 1000
            wait = wait_seconds(backoff, self.clock_ms(), self.manager.next_wake_ms())
            events = [self._rescan] if self.pool is None else [self._rescan, self.pool.starved]
            await _wait_any(events, wait)
            self._rescan.clear()
            if self.pool is not None:
                self.pool.starved.clear()

    def _cleaned(self, grab: Grab, result: JobResult) -> None:
        self.metrics.observe_clean(result.seconds)
        delay = self.deadlines.cleaned(grab, result, self.clock_ms())
        if delay is not None:
            self.metrics.observe_compaction_delay(grab.tp.topic, delay)

    # --- reload -------------------------------------------------------------------------------
    def reload(self) -> None:
        """SIGHUP: apply the new config's run-time settings, or keep the old config."""
        self.notifier.reloading()
        try:
            new = self._reload_config()
        except ConfigError as e:
            log.error(
                "config reload failed; keeping the running config",
                problems=[p.line() for p in e.problems],
            )
            self._reloaded()
            return
        new, changed, restart = compare_reload(self.loaded, new)  # against what runs
        c = new.config
        self.throttler.set_rate(c.io_max_bytes_per_second)
        self.budget.resize(c.dedupe_buffer_size)
        self.manager.configure(
            c.topic_settings,
            load_factor=c.load_factor,
            budget_bytes=c.dedupe_buffer_size,
            retry=_retry(new),
            workers=max(c.threads, 1),
        )
        self.loaded = new
        if self._tls is not None and c.tls_cert_file is not None and c.tls_key_file is not None:
            try:  # a renewed certificate, written over the old files, serves from now on
                load_chain(self._tls, c.tls_cert_file, c.tls_key_file)
            except TlsError as e:
                log.error("cannot reload the TLS certificate; serving the loaded one", error=str(e))
        if self.spark is not None:
            self.spark.configure(c)
        if self.pool is not None:
            threads = PoolSettings.of(new.config)
            self.pool.settings = dataclasses.replace(threads, threads=self.pool.settings.threads)
            self.pool.resize(threads.threads)
        log.info("config reloaded", changed=changed, needs_restart=restart)
        self._rescan.set()
        self._reloaded()

    def _reloaded(self) -> None:
        """End a reload for systemd: READY=1 again, unless the daemon was not ready yet (its
        first READY=1 is the kernel load's to send)."""
        if self.ready:
            self.notifier.ready(self._status_line())
        else:
            self.notifier.status(self._status_line())

    # --- the admin API (service._http.AdminApi) ------------------------------------------------
    def _totals(self) -> CleaningTotals:
        base = self.manager.totals
        return dataclasses.replace(
            base,
            segments_rolled=base.segments_rolled + self.maintenance.rolled,
            segments_deleted=base.segments_deleted + self.maintenance.deleted,
            worker_restarts=self.pool.restarts if self.pool is not None else 0,
        )

    def status(self) -> DaemonStatus:
        m = self.manager
        return DaemonStatus(
            now_ms=self.clock_ms(),
            partitions=m.statuses(),
            workers=tuple(self.pool.status.values()) if self.pool is not None else (),
            totals=self._totals(),
            max_dirty_ratio=m.max_dirty_ratio,
            last_run_ms=m.last_run_ms,
            logs_compacted_by_max_lag=m.logs_compacted_by_max_lag,
            dedupe_budget_bytes=self.budget.total,
            dedupe_budget_in_use_bytes=self.budget.in_use,
            throttle_sleep_seconds_total=self.throttler.slept_seconds,
            last_success_ms=m.last_success_ms,
            deadlines=self.deadlines.figures(),
            per_partition_metrics=self.loaded.config.per_partition_metrics,
            ready=self.ready,
            stopping=self.stopping,
            kernels=self.kernels,
        )

    def healthy(self) -> tuple[bool, str]:
        if self.stopping:
            return False, "stopping"
        if not self._manager_running:
            return False, "manager loop not running"
        if self.pool is not None and not self.pool.alive:
            return False, "a worker is dead"
        stall = STALL_FACTOR * self.loaded.config.backoff_ms / 1000 + 60
        if time.monotonic() - self.last_cycle > stall:
            return False, f"manager loop stalled for more than {stall:.0f} s"
        return True, "ok"

    def readiness(self) -> tuple[bool, dict[str, str]]:
        """``/readyz``: ready once the first survey is applied, the workers run and the kernels
        are loaded, while the daemon is healthy; each check's state, for the answer's body."""
        alive, health = self.healthy()
        checks = {
            "survey": "done" if self.surveyed else "pending",
            "kernels": self.kernels,
            "health": health,
        }
        return self.ready and alive, checks

    # --- pauses that outlive the process ------------------------------------------------------
    async def _restore_pauses(self) -> None:
        """Read each log dir's recorded pauses (``PauseFileError``, naming the file, when one
        is bad: the start stops) and hand them to the manager before the first survey."""
        dirs = self.loaded.config.log_dirs
        found = await self.service.submit(lambda: {d: read_pauses(d) for d in dirs})
        for log_dir, pauses in found.items():
            self.manager.restore_pauses(log_dir, pauses)
            if pauses:
                restored = [f"{tp} x{n}" if n > 1 else str(tp) for tp, n in sorted(pauses.items())]
                log.info("pauses restored", log_dir=str(log_dir), partitions=restored)
        self._recorded = found

    async def _record_pauses(self) -> None:
        """Write the pause record of each log dir whose pauses changed since it was written;
        StorageError (the first, after trying every dir) when one cannot be written."""
        async with self._pauses_lock:
            failed: StorageError | None = None
            for log_dir, pauses in self.manager.pauses().items():
                if self._recorded.get(log_dir, {}) == pauses:
                    continue
                try:
                    await self.service.submit(write_pauses, log_dir, pauses)
                except StorageError as e:
                    failed = failed or e
                    continue
                self._recorded[log_dir] = pauses
            if failed is not None:
                raise failed

    async def _record_pauses_logged(self) -> None:
        """``_record_pauses`` for the manager loop: a failure is logged (once while it lasts)
        and tried again at the next cycle."""
        try:
            await self._record_pauses()
        except StorageError as e:
            if str(e) != self._record_error:
                log.error("cannot record the pauses; a restart would lose them", error=str(e))
            self._record_error = str(e)
        else:
            self._record_error = None

    def _admin(
        self, tp: TopicPartition, action: Callable[[TopicPartition], None]
    ) -> PartitionStatus | None:
        if self.manager.status(tp) is None:
            return None
        action(tp)
        log.info("admin request", partition=str(tp), action=action.__name__)
        self._rescan.set()
        if self.pool is not None:
            self.pool.signal_aborts()
            self.pool.wake()
        return self.manager.status(tp)

    async def pause(self, tp: TopicPartition) -> PartitionStatus | None:
        """Pause ``tp`` and record it (StorageError when the record cannot be written: the
        pause holds in this process only)."""
        status = self._admin(tp, self.manager.pause)
        if status is not None:
            await self._record_pauses()
        return status

    async def resume(self, tp: TopicPartition) -> PartitionStatus | None:
        """Undo one pause of ``tp`` and record it (StorageError as for ``pause``)."""
        status = self._admin(tp, self.manager.resume)
        if status is not None:
            await self._record_pauses()
        return status

    async def clean(self, tp: TopicPartition) -> PartitionStatus | None:
        return self._admin(tp, self.manager.request_clean)

    def _status_line(self) -> str:
        return status_line(self.manager.live_statuses())


def wait_seconds(backoff_s: float, now_ms: int, wake_ms: int | None) -> float:
    """How long the manager loop sleeps: until the next log falls due (``wake_ms``), at least
    ``MIN_WAIT_S``, at most one backoff."""
    if wake_ms is None:
        return backoff_s
    return min(backoff_s, max((wake_ms - now_ms) / 1000, MIN_WAIT_S))


async def _wait_any(events: Iterable[asyncio.Event], timeout_s: float) -> None:
    """Until one of ``events`` is set or ``timeout_s`` has passed."""
    async with asyncio.TaskGroup() as group:
        waits = [group.create_task(event.wait()) for event in events]
        await asyncio.wait(waits, timeout=timeout_s, return_when=asyncio.FIRST_COMPLETED)
        for wait in waits:
            wait.cancel()
