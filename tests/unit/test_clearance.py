"""A request's clearance (gateway/core/clearance.py): what its vendor calls wait on, deferred by
the lifecycle alone, and who hears of text generated before any reaches the client."""

from __future__ import annotations

import asyncio

import pytest

from gateway.core.clearance import CLEAR, Clearance, Withheld


def test_without_a_deferred_verdict_a_call_waits_for_nothing_and_nobody_hears():
    asyncio.run(CLEAR.wait())
    assert not CLEAR.hears
    CLEAR.generated(0, "text")  # nobody to tell: nothing happens


def test_a_deferred_verdict_is_awaited_and_its_refusal_withholds_the_call():
    heard: list[tuple[int, str]] = []
    clearance = Clearance(heard=lambda candidate, text: heard.append((candidate, text)))
    verdict: asyncio.Future[None] | None = None

    async def go_ahead() -> None:
        assert verdict is not None
        await verdict

    async def run() -> None:
        nonlocal verdict
        verdict = asyncio.get_running_loop().create_future()
        clearance.defer_to(go_ahead)
        waiting = asyncio.create_task(clearance.wait())
        await asyncio.sleep(0)
        assert not waiting.done()  # the vendor is not asked before the verdict came
        verdict.set_result(None)
        await waiting
        verdict = asyncio.get_running_loop().create_future()
        verdict.set_exception(Withheld(RuntimeError("over the limit")))
        with pytest.raises(Withheld):
            await clearance.wait()
        clearance.defer_to(None)
        await clearance.wait()  # the call returned: nothing to wait for again

    asyncio.run(run())
    clearance.generated(1, "piece")
    assert clearance.hears and heard == [(1, "piece")]
