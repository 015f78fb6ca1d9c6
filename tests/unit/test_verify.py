"""planner/verify.py's rule for a chat call that forces a tool (`tool_choice` "required" or a named
function): an answer without a call of it, whole or streamed, is the vendor's failure, named."""

from __future__ import annotations

import pytest

from gateway.core.chat import ChatCall, ChatChoice
from gateway.core.completion import Chunk, Result, Usage
from gateway.core.errors import VendorFailed
from gateway.planner.verify import Expected

TOOLS = [{"type": "function", "function": {"name": name}} for name in ("lookup", "fetch")]
NAMED = {"type": "function", "function": {"name": "fetch"}}


def expected(**parameters) -> Expected:
    return Expected(ChatCall("m", [{"role": "user", "content": "x"}], parameters), "v")


def call_of(name: str, index: int | None = None) -> dict:
    call = {"id": f"c{name}", "type": "function", "function": {"name": name, "arguments": "{}"}}
    return call if index is None else {"index": index, **call}


def answered(finish: str, *called: str) -> Result:
    return Result([ChatChoice(0, "" if called else "text", finish,
                              tool_calls=[call_of(name) for name in called] or None)], Usage(1, 1))


def streamed(rule: Expected, finish: str, *called: str) -> None:
    pieces = [Chunk([ChatChoice(0, "", tool_calls=[call_of(name, i)])]) for i, name in enumerate(called)]
    rule.batch([*pieces, Chunk([ChatChoice(0, "text" if not called else "", finish)], Usage(1, 1))])
    rule.ended()


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "streamed"])
@pytest.mark.parametrize(("choice", "called", "why"), [
    ("required", (), 'without calling a tool although tool_choice was "required"'),
    (NAMED, (), "without calling fetch although tool_choice named it"),
    (NAMED, ("lookup",), "without calling fetch although tool_choice named it"),
])  # fmt: skip
def test_an_answer_without_the_forced_call_is_the_vendors_failure(choice, called, why, stream):
    rule = expected(tools=TOOLS, tool_choice=choice)
    with pytest.raises(VendorFailed, match=why) as failed:
        if stream:
            streamed(rule, "stop", *called)
        else:
            rule.result(answered("stop", *called))
    assert failed.value.vendor == "v"


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "streamed"])
@pytest.mark.parametrize(("parameters", "finish", "called"), [
    ({"tools": TOOLS, "tool_choice": "required"}, "tool_calls", ("lookup",)),
    ({"tools": TOOLS, "tool_choice": NAMED}, "tool_calls", ("lookup", "fetch")),
    ({"tools": TOOLS, "tool_choice": NAMED}, "length", ("fetch",)),  # cut short in its arguments: still its call
    ({"tools": TOOLS, "tool_choice": "required"}, "content_filter", ()),  # the answer says what it is
    ({"tools": TOOLS, "tool_choice": "auto"}, "stop", ()),
    ({"tools": TOOLS}, "stop", ()),
    ({"tool_choice": "required"}, "stop", ()),  # no tools: nothing to force (the rules' 422 first)
])  # fmt: skip
def test_an_answer_that_does_what_was_asked_passes(parameters, finish, called, stream):
    rule = expected(**parameters)
    if stream:
        streamed(rule, finish, *called)
    else:
        assert rule.result(answered(finish, *called)).choices[0].finish_reason == finish


def test_every_choice_must_call_it():
    rule = expected(tools=TOOLS, tool_choice="required", n=2)
    both = Result([ChatChoice(0, "", "tool_calls", tool_calls=[call_of("fetch")]), ChatChoice(1, "text", "stop")],
                  Usage(1, 1))
    with pytest.raises(VendorFailed, match="tool_choice"):
        rule.result(both)


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "streamed"])
def test_a_forced_deprecated_function_call_is_held_alike(stream):
    rule = expected(functions=[{"name": "fetch"}], function_call={"name": "fetch"})
    with pytest.raises(VendorFailed, match="without calling fetch although function_call named it"):
        if stream:
            streamed(rule, "stop")
        else:
            rule.result(answered("stop"))
    called = expected(functions=[{"name": "fetch"}], function_call={"name": "fetch"})
    function = {"name": "fetch", "arguments": "{}"}
    if stream:
        called.batch([Chunk([ChatChoice(0, "", function_call=function)]),
                      Chunk([ChatChoice(0, "", "function_call")], Usage(1, 1))])
        called.ended()
    else:
        called.result(Result([ChatChoice(0, "", "function_call", function_call=function)], Usage(1, 1)))
