"""Any valid chat conversation, translated for Anthropic's Messages API and Gemini's
generateContent, is a request the vendor takes (the fakes check every request's shape) or a 400
naming the parameter and the vendor, never a 5xx: conversations of every role, content as text or
parts with images, tool calls answered by tool messages, tools and tool_choice, and parameters,
drawn by hypothesis and sent through the running gateway."""

from __future__ import annotations

import json

import httpx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.support.bodies import sse_events
from tests.support.chat import TOOLS
from tests.support.environments import SHARED_TLS

EXAMPLES = settings(max_examples=60, deadline=None, suppress_health_check=list(HealthCheck))
WORD = st.one_of(st.text(st.characters(codec="utf-8", exclude_categories=["Cs"]), min_size=1, max_size=8),
                 st.sampled_from([" ", "\n", "ends in a space ", "x"]))
IMAGE = st.sampled_from(["data:image/png;base64,iVBORw0KGgo=", "https://x.test/a.jpg", "data:image/webp;base64,UklG"])
PART = st.one_of(st.builds(lambda text: {"type": "text", "text": text}, WORD),
                 st.builds(lambda url: {"type": "image_url", "image_url": {"url": url}}, IMAGE))
CONTENT = st.one_of(WORD, st.lists(PART, min_size=1, max_size=3))
TEXT_ONLY = st.one_of(WORD, st.lists(st.builds(lambda text: {"type": "text", "text": text}, WORD), min_size=1,
                                     max_size=2))


@st.composite
def conversations(draw) -> list[dict]:
    """A conversation OpenAI would take: system turns anywhere, user turns, assistant turns that may
    call tools, each call answered by a tool message right after; it ends with the user's or a
    tool's turn, as a request for the model's next one does, or an assistant's to continue. Any
    text may be whitespace only."""
    messages: list[dict] = []
    if draw(st.booleans()):
        messages.append({"role": draw(st.sampled_from(["system", "developer"])), "content": draw(TEXT_ONLY)})
    messages.append({"role": "user", "content": draw(CONTENT)})
    for turn in range(draw(st.integers(0, 3))):
        kind = draw(st.sampled_from(["user", "assistant", "tools", "system"]))
        if kind == "user":
            messages.append({"role": "user", "content": draw(CONTENT)})
        elif kind == "system":
            messages.append({"role": "system", "content": draw(TEXT_ONLY)})
        elif kind == "assistant":
            messages.append({"role": "assistant", "content": draw(TEXT_ONLY)})
        else:
            calls = [{"id": f"call_{turn}_{k}", "type": "function", "function": {
                "name": draw(st.sampled_from(["lookup", "fetch"])),
                "arguments": json.dumps({"said": draw(WORD)}) if draw(st.booleans()) else ""}}
                for k in range(draw(st.integers(1, 2)))]
            messages.append({"role": "assistant", "content": draw(st.one_of(st.none(), WORD)), "tool_calls": calls})
            messages.extend({"role": "tool", "tool_call_id": call["id"], "content": draw(TEXT_ONLY)} for call in calls)
    if messages[-1]["role"] not in ("user", "tool") and draw(st.booleans()):
        messages.append({"role": "user", "content": draw(CONTENT)})
    return messages


PARAMETERS = st.fixed_dictionaries({}, optional={
    "max_tokens": st.integers(1, 4), "temperature": st.floats(0, 1), "top_p": st.floats(0, 1),
    "top_k": st.integers(1, 50), "stop": st.one_of(WORD, st.lists(WORD, min_size=1, max_size=4)),
    "n": st.integers(1, 3), "stream": st.booleans(), "user": WORD, "seed": st.integers(-(2**40), 2**40),
    "tools": st.just(TOOLS), "tool_choice": st.sampled_from(["none", "auto", "required", {
        "type": "function", "function": {"name": "fetch"}}]),
    "parallel_tool_calls": st.booleans(),
    "functions": st.just([tool["function"] for tool in TOOLS]),
    "function_call": st.sampled_from(["none", "auto", {"name": "lookup"}]),
    "response_format": st.sampled_from([{"type": "text"}, {"type": "json_object"}]),
})


@pytest.mark.parametrize("vendor", ["anthropic", "gemini"])
def test_a_valid_conversation_is_served_or_refused_by_name(vendors_gateway, database, anthropic_upstream,
                                                           gemini_upstream, vendor):
    fakes = {"anthropic": anthropic_upstream, "gemini": gemini_upstream}
    with httpx.Client(base_url=vendors_gateway.url, headers={"x-api-key": database.key}, timeout=30,
                      verify=SHARED_TLS) as client:

        @EXAMPLES
        @given(messages=conversations(), parameters=PARAMETERS)
        def served_or_refused(messages, parameters):
            if parameters.get("tool_choice") not in (None, "none") and "tools" not in parameters:
                parameters["tools"] = TOOLS
            if "tools" in parameters:  # the deprecated functions only without tools (endpoints/chat/rules.py)
                parameters.pop("functions", None)
                parameters.pop("function_call", None)
            elif parameters.get("function_call") not in (None, "none"):
                parameters["functions"] = [tool["function"] for tool in TOOLS]
            fake = fakes[vendor]
            fake.clear()
            answer = client.post("/v5/chat/completions", json={"model": f"{vendor}/m", "messages": messages,
                                                                 **parameters})
            assert fake.violations == [], (fake.violations, fake.requests[-1]["body"] if fake.requests else None)
            if answer.status_code == 400:
                error = answer.json()["error"]
                assert error["vendor"] == vendor and error["code"] == "unsupported_parameter", error
                assert fake.requests == []
            else:
                assert answer.status_code == 200, answer.text
                if parameters.get("stream"):  # and no error event in it
                    events = [json.loads(e["data"]) for e in sse_events(answer.text) if e["data"].startswith("{")]
                    assert not [e for e in events if "error" in e], answer.text

        served_or_refused()

