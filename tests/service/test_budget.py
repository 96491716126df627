"""The shared dedupe budget: FIFO-fair, never over its total, always given back."""

from __future__ import annotations

import asyncio
import random

import pytest

from cleanerd.service._budget import DedupeBudget
from tests.support.polling import until

TIMEOUT = 10  # only against hangs


@pytest.mark.asyncio
async def test_grants_at_most_the_total() -> None:
    budget = DedupeBudget(100)
    async with budget.lease(30) as a:
        assert (a, budget.in_use) == (30, 30)
    assert budget.in_use == 0
    async with budget.lease(1000) as whole:
        assert whole == 100
        assert budget.in_use == 100
    assert budget.in_use == 0


@pytest.mark.asyncio
async def test_big_waiter_at_the_head_blocks_later_small_ones() -> None:
    budget = DedupeBudget(100)
    order: list[str] = []
    release_first = asyncio.Event()

    async def hold(name: str, n: int, until: asyncio.Event | None = None) -> None:
        async with budget.lease(n):
            order.append(name)
            if until is not None:
                await until.wait()

    first = asyncio.create_task(hold("first", 60, release_first))
    await until(lambda: order == ["first"], TIMEOUT)
    big = asyncio.create_task(hold("big", 80))
    await until(lambda: budget.waiting == 1, TIMEOUT)
    small = asyncio.create_task(hold("small", 10))  # would fit next to "first", but must wait
    await until(lambda: budget.waiting == 2, TIMEOUT)
    assert order == ["first"]
    assert budget.waiting == 2
    assert budget.in_use == 60
    release_first.set()
    await asyncio.wait_for(asyncio.gather(first, big, small), TIMEOUT)
    assert order == ["first", "big", "small"]
    assert budget.in_use == 0
    assert budget.waiting == 0


@pytest.mark.asyncio
async def test_never_over_budget_under_stress() -> None:
    budget = DedupeBudget(1000)
    rng = random.Random(42)
    peak = 0
    held = 0
    served: list[int] = []

    async def worker(i: int, n: int, hold_steps: int) -> None:
        nonlocal peak, held
        async with budget.lease(n) as granted:
            assert granted == min(n, budget.total)
            held += granted
            peak = max(peak, held)
            # granted to waiters that have not run yet counts in in_use too
            assert held <= budget.in_use <= budget.total
            for _ in range(hold_steps):
                await asyncio.sleep(0)
                assert budget.in_use <= budget.total
            held -= granted
            served.append(i)

    over: list[int] = []
    finished = False

    async def watch() -> None:
        while not finished:
            if budget.in_use > budget.total:
                over.append(budget.in_use)
            await asyncio.sleep(0)

    watcher = asyncio.create_task(watch())
    tasks = [
        asyncio.create_task(worker(i, rng.randint(1, 1200), rng.randint(0, 5))) for i in range(300)
    ]
    await asyncio.wait_for(asyncio.gather(*tasks), TIMEOUT)
    finished = True
    await watcher
    assert over == []
    assert sorted(served) == list(range(300))
    assert peak <= budget.total
    assert budget.in_use == 0
    assert budget.waiting == 0


@pytest.mark.asyncio
async def test_returned_on_error() -> None:
    budget = DedupeBudget(100)
    seen: list[int] = []

    async def clean() -> None:
        async with budget.lease(70):
            seen.append(budget.in_use)
            raise RuntimeError("engine failed")

    with pytest.raises(RuntimeError, match="engine failed"):
        await clean()
    assert seen == [70]
    assert budget.in_use == 0


@pytest.mark.asyncio
async def test_returned_on_cancel_while_holding() -> None:
    budget = DedupeBudget(100)
    holding = asyncio.Event()

    async def clean() -> None:
        async with budget.lease(70):
            holding.set()
            await asyncio.Event().wait()  # a long clean

    task = asyncio.create_task(clean())
    await asyncio.wait_for(holding.wait(), TIMEOUT)
    assert budget.in_use == 70
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert budget.in_use == 0


@pytest.mark.asyncio
async def test_cancel_while_waiting_unblocks_the_rest() -> None:
    budget = DedupeBudget(100)
    got: list[int] = []
    first = await budget.acquire(60)

    async def want(n: int) -> None:
        async with budget.lease(n) as granted:
            got.append(granted)

    big = asyncio.create_task(want(80))  # waits at the head
    await until(lambda: budget.waiting == 1, TIMEOUT)
    small = asyncio.create_task(want(30))  # waits behind it
    await until(lambda: budget.waiting == 2, TIMEOUT)
    assert budget.waiting == 2
    big.cancel()
    with pytest.raises(asyncio.CancelledError):
        await big
    await asyncio.wait_for(small, TIMEOUT)  # fits next to "first" once the head is gone
    assert got == [30]
    assert budget.waiting == 0
    budget.release(first)
    assert budget.in_use == 0


@pytest.mark.asyncio
async def test_cancel_after_grant_before_resuming_gives_it_back() -> None:
    budget = DedupeBudget(100)
    first = await budget.acquire(100)
    waiter = asyncio.create_task(budget.acquire(50))
    await until(lambda: budget.waiting == 1, TIMEOUT)
    budget.release(first)  # grants the waiter, which has not run yet
    assert budget.in_use == 50
    waiter.cancel()
    with pytest.raises(asyncio.CancelledError):
        await waiter
    assert budget.in_use == 0


@pytest.mark.asyncio
async def test_resize_wakes_waiters_and_caps_grants() -> None:
    budget = DedupeBudget(100)
    first = await budget.acquire(100)
    waiter = asyncio.create_task(budget.acquire(150))
    await until(lambda: budget.waiting == 1, TIMEOUT)
    assert budget.waiting == 1
    budget.resize(300)  # room for 200 more, and 150 <= 300
    granted = await asyncio.wait_for(waiter, TIMEOUT)
    assert granted == 150
    assert budget.in_use == 250
    budget.release(granted)
    budget.resize(50)  # below what is in use: nobody gets in until enough comes back
    late = asyncio.create_task(budget.acquire(80))
    await until(lambda: budget.waiting == 1, TIMEOUT)
    assert budget.waiting == 1
    budget.release(first)
    assert await asyncio.wait_for(late, TIMEOUT) == 50  # capped at the new total
    budget.release(50)
    assert budget.in_use == 0


def test_bad_sizes_are_refused() -> None:
    with pytest.raises(ValueError, match="positive"):
        DedupeBudget(0)
    budget = DedupeBudget(10)
    with pytest.raises(ValueError, match="positive"):
        budget.resize(-1)
    with pytest.raises(ValueError, match="in use"):
        budget.release(5)


@pytest.mark.asyncio
async def test_zero_byte_lease_is_refused() -> None:
    budget = DedupeBudget(10)
    with pytest.raises(ValueError, match="positive"):
        async with budget.lease(0):
            pass
