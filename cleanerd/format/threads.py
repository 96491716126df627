"""The shared thread pool that ``index_batches(threads=...)`` spreads its nogil kernels over."""

from __future__ import annotations

import itertools
import os
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor, wait

import numpy as np

from cleanerd.format.scan import I64


def split_weights(weights: I64, parts: int, min_weight: int) -> list[tuple[int, int]]:
    """Cut ``range(len(weights))`` into at most ``parts`` contiguous chunks of similar weight.

    Chunks weigh at least ``min_weight`` where possible; there is always at least one chunk.
    """
    n = weights.shape[0]
    cum = np.cumsum(np.maximum(weights, 0))
    total = int(cum[-1]) if n else 0
    parts = min(parts, n, max(1, total // max(min_weight, 1)))
    if parts <= 1:
        return [(0, n)]
    targets = total * np.arange(1, parts, dtype=np.int64) // parts
    cuts = (np.searchsorted(cum, targets, side="left") + 1).tolist()
    bounds = sorted({0, n, *(min(max(c, 1), n - 1) for c in cuts)})
    return list(itertools.pairwise(bounds))


_pool: list[ThreadPoolExecutor] = []  # created on first use, shared by every caller
_pool_lock = threading.Lock()


def _executor() -> ThreadPoolExecutor:
    with _pool_lock:
        if not _pool:
            workers = max(os.cpu_count() or 1, 2)
            _pool.append(ThreadPoolExecutor(workers, thread_name_prefix="cleanerd-format"))
        return _pool[0]


def run_tasks(tasks: list[Callable[[], None]], threads: int) -> None:
    """Run ``tasks`` on ``threads`` threads (this one included), each taking the next in order.

    Returns when every task has finished; the first exception raised by a task is re-raised then.
    """
    queue = iter(tasks)
    lock = threading.Lock()

    def worker() -> None:
        while True:
            with lock:
                task = next(queue, None)
            if task is None:
                return
            task()

    helpers = min(threads, len(tasks)) - 1
    if helpers <= 0:
        worker()
        return
    pool = _executor()
    futures = [pool.submit(worker) for _ in range(helpers)]
    try:
        worker()
    finally:
        for f in futures:
            f.cancel()  # helpers still queued behind other callers' work have nothing left to do
        wait(futures)  # never return (or raise) while a task still writes into shared arrays
    for f in futures:
        if not f.cancelled():
            f.result()
