"""The daemon's event loop runner: uvloop and the GIL switch interval, set and put back."""

from __future__ import annotations

import asyncio
import sys

import pytest
import uvloop

from cleanerd.service._runner import SWITCH_INTERVAL_S, run_async


def test_run_async_uses_uvloop_and_a_short_switch_interval_then_restores_it() -> None:
    before = sys.getswitchinterval()
    seen: dict[str, object] = {}

    async def main() -> int:
        seen["interval"] = sys.getswitchinterval()
        seen["loop"] = type(asyncio.get_running_loop())
        return 7

    assert run_async(main) == 7
    assert seen["interval"] == SWITCH_INTERVAL_S
    assert seen["loop"] is uvloop.Loop
    assert sys.getswitchinterval() == before


def test_run_async_restores_the_interval_when_main_raises() -> None:
    before = sys.getswitchinterval()

    async def main() -> int:
        raise RuntimeError("boom")

    with pytest.raises(RuntimeError, match="boom"):
        run_async(main)
    assert sys.getswitchinterval() == before
