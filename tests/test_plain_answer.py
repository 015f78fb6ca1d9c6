"""A plain (non-streamed) completion's answer closes its meter after the answer is sent, and also
when sending fails: the ledger row comes after the client's bytes, and always comes."""

from __future__ import annotations

import asyncio

import pytest

from handlers.completions import _Answer

SCOPE = {"type": "http", "method": "POST", "path": "/v5/completions", "headers": []}


def test_the_meter_closes_after_the_answers_head_and_body_went_out():
    seen: list[str] = []

    async def send(message: dict) -> None:
        seen.append(message["type"])

    answer = _Answer(b'{"id":"cmpl-1"}', {"x-request-id": "cmpl-1"}, then=lambda: seen.append("meter closed"))
    asyncio.run(answer(SCOPE, None, send))
    assert seen == ["http.response.start", "http.response.body", "meter closed"]


def test_the_meter_closes_when_the_answer_could_not_be_sent():
    closed: list[bool] = []

    async def send(message: dict) -> None:
        raise OSError("the client's connection is gone")

    answer = _Answer(b'{"id":"cmpl-1"}', {}, then=lambda: closed.append(True))
    with pytest.raises(OSError):
        asyncio.run(answer(SCOPE, None, send))
    assert closed == [True]
