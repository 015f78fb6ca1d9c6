"""gateway/endpoints/responses/stream.py: chat chunks' choices in, OpenAI's Responses events out; any chunks
give a well-formed sequence whose terminal response holds exactly what the deltas said."""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from openai.types.responses import ResponseStreamEvent
from pydantic import TypeAdapter

from gateway.core.chat import ChatChoice
from gateway.endpoints.responses.answer import MAX_OUTPUT_ITEMS, Unexpected, output_text
from gateway.endpoints.responses.stream import ResponseStream, sse
from generated.models import Response

OPENAI_EVENTS = TypeAdapter(ResponseStreamEvent)

REQUEST = {"model": "fake/m", "input": "Hi", "stream": True}
USAGE = {"prompt_tokens": 5, "completion_tokens": 3, "total_tokens": 8}
TERMINALS = {"response.completed", "response.incomplete", "response.failed"}


def stream() -> ResponseStream:
    return ResponseStream(REQUEST, response_id="resp_1", created_at=1, model="fake/m")


def chunk(delta: dict | None = None, finish: str | None = None) -> list[ChatChoice]:
    """A chat chunk's choices, from its delta as chat's wire writes it."""
    if delta is None and finish is None:
        return []
    delta = delta or {}
    return [ChatChoice(0, delta.get("content") or "", finish, refusal=delta.get("refusal"),
                       tool_calls=delta.get("tool_calls"))]


def run(chunks: list[list[ChatChoice]], **end) -> list[dict]:
    s = stream()
    events = s.start()
    for c in chunks:
        events += s.feed(c)
    return events + s.end(**end)


def types(events: list[dict]) -> list[str]:
    return [e["type"] for e in events]


def test_text_then_completed_with_usage():
    events = run([chunk({"role": "assistant", "content": ""}), chunk({"content": "Hel"}), chunk({"content": "lo"}),
                  chunk(finish="stop")], usage=USAGE)
    assert types(events) == [
        "response.created", "response.in_progress", "response.output_item.added", "response.content_part.added",
        "response.output_text.delta", "response.output_text.delta", "response.output_text.done",
        "response.content_part.done", "response.output_item.done", "response.completed"]
    final = events[-1]["response"]
    assert output_text(final) == "Hello" and final["usage"]["total_tokens"] == 8
    assert events[0]["response"]["status"] == "in_progress" and events[0]["response"]["output"] == []


def test_a_vendor_that_breaks_off_ends_failed_with_what_it_made_and_the_usage_counted():
    events = run([chunk({"content": "Par"})], error={"code": "vendor_error", "message": "connection reset"},
                 usage={"prompt_tokens": 5, "completion_tokens": 1, "total_tokens": 6})
    final = events[-1]
    assert final["type"] == "response.failed" and final["response"]["error"]["code"] == "server_error"
    assert final["response"]["usage"]["output_tokens"] == 1
    assert final["response"]["output"][0]["status"] == "incomplete" and output_text(final["response"]) == "Par"


def test_a_client_that_leaves_ends_incomplete_without_a_reason_openai_does_not_name():
    events = run([chunk({"content": "Par"})], client_left=True, usage=USAGE)
    assert events[-1]["type"] == "response.incomplete"
    assert events[-1]["response"]["incomplete_details"] == {"reason": None}
    assert events[-1]["response"]["usage"]["total_tokens"] == 8


def test_length_is_incomplete_max_output_tokens_and_a_stream_without_a_finish_failed():
    assert run([chunk({"content": "a"}, "length")])[-1]["response"]["incomplete_details"] == {
        "reason": "max_output_tokens"}
    cut = run([chunk({"content": "a"})])[-1]
    assert cut["type"] == "response.failed" and cut["response"]["error"]["code"] == "server_error"


def test_end_twice_sends_one_terminal_event():
    s = stream()
    s.start()
    assert len(s.end()) == 1 and s.end() == []


def test_sse_names_the_event_and_carries_its_json():
    event = run([chunk({"content": "é\ud800"}, "stop")])[4]
    wire = sse(event)
    assert wire.startswith(b"event: response.output_text.delta\ndata: ") and wire.endswith(b"\n\n")
    assert json.loads(wire.split(b"data: ", 1)[1]) == event


# -- any chunks ---------------------------------------------------------------------------------

texts = st.text(max_size=6)
tool_piece = st.tuples(st.integers(0, 2), st.text(max_size=5))
deltas = st.one_of(
    st.builds(lambda t: {"content": t}, texts),
    st.builds(lambda t: {"refusal": t}, texts),
    st.builds(lambda p: {"tool_calls": [{"index": p[0], "function": {"arguments": p[1]}}]}, tool_piece))
finishes = st.sampled_from([None, "stop", "length", "tool_calls", "content_filter"])
ends = st.sampled_from([{}, {"error": {"code": "vendor_error", "message": "cut"}}, {"client_left": True}])


@settings(max_examples=300, deadline=None)
@given(st.lists(deltas, max_size=25), finishes, st.booleans(), ends)
def test_any_chunks_make_a_well_formed_sequence_whose_response_is_the_deltas(given_deltas, finish, with_usage, end):
    s = stream()
    events: list[dict] = []
    as_made: list[dict] = []  # each event's JSON, taken the moment it was made

    def take(made: list[dict]) -> None:
        events.extend(made)
        as_made.extend(json.loads(sse(e).split(b"data: ", 1)[1]) for e in made)

    take(s.start())
    seen_calls: set[int] = set()
    for delta in given_deltas:
        for call in delta.get("tool_calls", ()):
            if call["index"] not in seen_calls:  # a call's first piece names it, as chat sends it
                seen_calls.add(call["index"])
                call.update(id=f"call_{call['index']}", type="function")
                call["function"]["name"] = "f"
        take(s.feed(chunk(delta)))
    take(s.feed(chunk(finish=finish)) if finish else [])
    take(s.end(**end, **({"usage": USAGE} if with_usage else {})))

    # What the stream did after an event (its items growing, closing, the response ending)
    # changed nothing in it.
    assert [json.loads(json.dumps(e)) for e in events] == as_made
    assert [e["sequence_number"] for e in events] == list(range(len(events)))
    assert types(events)[:2] == ["response.created", "response.in_progress"]
    assert [t for t in types(events) if t in TERMINALS] == [types(events)[-1]]
    final = events[-1]["response"]
    Response.model_validate(final)
    for event in events:  # each one of OpenAI's own event types, as the openai SDK validates them
        OPENAI_EVENTS.validate_python(event)
    assert (final["usage"] is not None) == with_usage
    # The text is exactly the deltas, both as the response holds it and as the events said it.
    said = "".join(d.get("content", "") for d in given_deltas)
    text_deltas = [e["delta"] for e in events if e["type"] == "response.output_text.delta"]
    assert output_text(final) == said == "".join(text_deltas)
    assert "".join(p["refusal"] for i in final["output"] if i["type"] == "message" for p in i["content"]
                   if p["type"] == "refusal") == "".join(d.get("refusal", "") for d in given_deltas)
    # Every call's arguments are its pieces, in order; ids kept.
    calls = [i for i in final["output"] if i["type"] == "function_call"]
    for index in seen_calls:
        [item] = [c for c in calls if c["call_id"] == f"call_{index}"]
        pieces = [c["function"]["arguments"] for d in given_deltas for c in d.get("tool_calls", ())
                  if c["index"] == index]
        assert item["arguments"] == "".join(pieces)
    # Each item is added once, then done once, after its deltas; nothing is empty.
    added = [e["item"]["id"] for e in events if e["type"] == "response.output_item.added"]
    done = [e["item"]["id"] for e in events if e["type"] == "response.output_item.done"]
    assert sorted(added) == sorted(done) == sorted(i["id"] for i in final["output"]) and len(set(added)) == len(added)
    for e in events:
        if e["type"].endswith(".delta"):
            assert e["delta"] != ""
            closing = next(n for n, x in enumerate(events)
                           if x["type"] == "response.output_item.done" and x["item"]["id"] == e["item_id"])
            assert events.index(e) < closing
    # Parts open and close in pairs, and a done part holds what was said in it.
    opened = [(e["item_id"], e["content_index"]) for e in events if e["type"] == "response.content_part.added"]
    closed = {(e["item_id"], e["content_index"]): e["part"] for e in events
              if e["type"] == "response.content_part.done"}
    assert sorted(opened) == sorted(closed)
    by_id = {i["id"]: i for i in final["output"]}
    assert all(by_id[item]["content"][index] == part for (item, index), part in closed.items())
    status = final["status"]
    assert all(i["status"] == ("completed" if status == "completed" else "incomplete") or
               (i["status"] == "completed" and i["type"] == "message") for i in final["output"])


def test_the_response_mid_stream_holds_what_the_deltas_said_so_far():
    """What a client that leaves mid-stream has kept (http/response_events.py reads `response`)."""
    s = stream()
    s.start()
    s.feed(chunk({"content": "Hel"}))
    s.feed(chunk({"content": "lo"}))
    s.feed(chunk({"tool_calls": [{"index": 0, "id": "call_0", "type": "function",
                                  "function": {"name": "f", "arguments": '{"a":'}}]}))
    s.feed(chunk({"tool_calls": [{"index": 0, "function": {"arguments": " 1"}}]}))
    assert output_text(s.response) == "Hello" and s.response["output"][1]["arguments"] == '{"a": 1'
    s.feed(chunk({"tool_calls": [{"index": 0, "function": {"arguments": "}"}}]}, "tool_calls"))
    final = s.end()[-1]["response"]
    assert output_text(final) == "Hello" and final["output"][1]["arguments"] == '{"a": 1}'


def test_a_vendor_calling_tools_without_end_is_stopped_at_the_contracts_bound():
    s = stream()
    s.start()
    with pytest.raises(Unexpected):
        for index in range(MAX_OUTPUT_ITEMS + 1):
            s.feed(chunk({"tool_calls": [{"index": index, "id": f"call_{index}", "type": "function",
                                          "function": {"name": "f", "arguments": "{}"}}]}))
    assert len(s.response["output"]) == MAX_OUTPUT_ITEMS
    final = s.end(error={"code": "server_error", "message": "too many items"})[-1]["response"]
    assert final["status"] == "failed"
    Response.model_validate(final)
