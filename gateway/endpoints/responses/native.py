"""A Responses request to a vendor that has the Responses API itself (OpenAI), and its answer and
events back into the contract's shapes.

The gateway keeps conversations itself, on every vendor alike, so the vendor is sent `store: false`
and the whole conversation as `input` (the stored chain's items, then the request's), never a
`previous_response_id`: the vendor's storage is neither relied on nor filled. Reasoning items come
back with `encrypted_content` (asked for with `include`), which is what lets a stateless
conversation hand a reasoning model its own reasoning again.

What comes back is the vendor's, hence untrusted: the response is rebuilt from the request's echo
(`shell`) and only what the vendor decides (status, error, incomplete_details, output, usage),
each item and part kept to the contract's fields (read off the generated models, so the contract
stays the one list). An item type or an event the contract does not name is not passed on: an
unknown item is `Unexpected` (the vendor answered what was not asked: a 502), an unknown event is
dropped. A stream the vendor ends without its terminal event is ended by `end(...)`, as
`ResponseStream` ends a chat stream: every open item closed, exactly one terminal event, usage.
The usage is read as every vendor count is (vendors/untrusted.py): the ledger bills it (`billed`),
and the client is told the same counts.

What the contract has no place for is refused before the vendor is asked: a built-in tool (its
output items are not the contract's), an `include` beyond reasoning state, a part naming a file (a
file id names one of the vendor account's files, which every account of the gateway shares). An input message of
the user, system or developer carries no `id` on OpenAI's wire (only listed items have one), so the
ids the gateway gave stored input items stay with the gateway.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, get_args

import orjson

from gateway.core.chat import ChatChoice
from gateway.core.completion import Usage
from gateway.endpoints.responses.answer import (
    INCOMPLETE_REASONS,
    MAX_OUTPUT_ITEMS,
    Unexpected,
    error_value,
    output_text,
    shell,
    usage_from_chat,
)
from gateway.endpoints.responses.request import FUNCTION, Refused, input_items, refuse_files
from gateway.endpoints.responses.rules import answer_format
from gateway.endpoints.usage import usage_body
from gateway.vendors import untrusted as read
from generated.models import (
    ResponseFunctionCall,
    ResponseOutputMessage,
    ResponseOutputRefusal,
    ResponseOutputText,
    ResponseReasoningItem,
    ResponseStreamEvent,
)

ITEMS = {"message": ResponseOutputMessage, "function_call": ResponseFunctionCall, "reasoning": ResponseReasoningItem}
PARTS = {"output_text": ResponseOutputText, "refusal": ResponseOutputRefusal}
EVENTS = frozenset(get_args(ResponseStreamEvent.model_fields["event"].annotation))  # the contract's names
# The fields an item-level event may carry besides its item or part (OpenAI's event shapes).
EVENT_FIELDS = ("item_id", "output_index", "content_index", "summary_index", "delta", "text", "arguments", "name",
                "refusal", "logprobs")
# `include` values a native vendor serves within the contract: reasoning state, kept opaque.
INCLUDED = ("reasoning.encrypted_content",)
TERMINAL = frozenset({"response.completed", "response.incomplete", "response.failed"})


def native_request(request: dict[str, Any], history: Sequence[dict[str, Any]] = ()) -> dict[str, Any]:
    """The body for the vendor's own `/v1/responses`: the request, stateless. `Refused` for what
    the contract has no place for."""
    body = {name: value for name, value in request.items()
            if name not in ("previous_response_id", "store", "metadata", "include") and value is not None}
    for i, value in enumerate(request.get("include") or ()):
        if value not in INCLUDED:
            raise Refused(f"include[{i}]", f"'{value}' is not served by the gateway's contract")
    for i, tool in enumerate(request.get("tools") or ()):
        if tool.get("type") != FUNCTION:
            raise Refused(f"tools[{i}]", f"the built-in tool '{tool.get('type')}' is not run through the gateway; "
                                         "only function tools are served")
    given = input_items(request)
    for i, item in enumerate(given):
        refuse_files(item.get("content"), f"input[{i}].content")
        refuse_files(item.get("output"), f"input[{i}].output")
    body["input"] = [_sent(item) for item in (*history, *given)]
    body["store"] = False
    body["include"] = list(INCLUDED)
    if body.get("stream"):
        body["stream"] = True
    return body


def _sent(item: dict[str, Any]) -> dict[str, Any]:
    """An input item as OpenAI takes it: a user's, system's or developer's message without an id."""
    if item.get("type", "message") == "message" and item.get("role") != "assistant" and "id" in item:
        return {name: value for name, value in item.items() if name != "id"}
    return item


def _keep(value: dict[str, Any], model: Any) -> dict[str, Any]:
    return {name: value[name] for name in model.model_fields if name in value}


def _part(part: dict[str, Any]) -> dict[str, Any]:
    model = PARTS.get(part.get("type"))
    if model is None:
        raise Unexpected(f"a content part of type {part.get('type')!r}")
    kept = _keep(part, model)
    if kept.get("annotations") or kept.get("logprobs"):
        raise Unexpected("annotations or logprobs that were not asked for")
    return kept


def item(value: dict[str, Any]) -> dict[str, Any]:
    """An output item kept to the contract's fields."""
    model = ITEMS.get(value.get("type"))
    if model is None:
        raise Unexpected(f"an output item of type {value.get('type')!r}")
    kept = _keep(value, model)
    if kept["type"] == "message":
        kept["content"] = [_part(p) for p in kept.get("content") or ()]
    if kept["type"] == "reasoning":
        kept["summary"] = [{"type": "summary_text", "text": s["text"]} for s in kept.get("summary") or ()]
        if kept.get("content") is not None:
            kept["content"] = [{"type": "reasoning_text", "text": c["text"]} for c in kept["content"]]
    return kept


def billed(value: Any) -> Usage | None:
    """The vendor's usage, each count read as untrusted; None when it reported none."""
    if value is None:
        return None
    found = read.obj(value, "the response's usage")
    prompt = read.details(found.get("input_tokens_details") or {}, "input_tokens_details")
    completion = read.details(found.get("output_tokens_details") or {}, "output_tokens_details")
    return read.usage(found.get("input_tokens"), found.get("output_tokens"), "the response's usage",
                      prompt, completion)


def usage(value: Any) -> dict[str, Any] | None:
    """The response's usage as the client is told it: the counts the ledger bills (the details'
    names are chat's too: `cached_tokens`, `reasoning_tokens`)."""
    counted = billed(value)
    return None if counted is None else usage_from_chat(usage_body(counted))


def from_native(answer: dict[str, Any], request: dict[str, Any], *, response_id: str, created_at: int,
                model: str) -> dict[str, Any]:
    """The contract's response from the vendor's: the request's echo, the vendor's outcome."""
    made = shell(request, response_id=response_id, created_at=created_at, model=model,
                 status=answer.get("status") or "in_progress")
    if made["status"] not in ("completed", "incomplete", "failed", "in_progress"):
        raise Unexpected(f"a response status {made['status']!r}")
    if answer.get("error"):
        made["error"] = error_value(answer["error"])
    if answer.get("incomplete_details"):
        reason = answer["incomplete_details"].get("reason")
        made["incomplete_details"] = {"reason": reason if reason in ("max_output_tokens", "content_filter") else None}
    if len(answer.get("output") or ()) > MAX_OUTPUT_ITEMS:
        raise Unexpected(f"more than {MAX_OUTPUT_ITEMS} output items")
    made["output"] = [item(i) for i in answer.get("output") or ()]
    made["usage"] = usage(answer.get("usage"))
    return made


# A response's incomplete reason as chat's finish reason (answer.py INCOMPLETE_REASONS, reversed).
FINISH = {reason: finish for finish, reason in INCOMPLETE_REASONS.items()}


def chat_choice(response: dict[str, Any]) -> ChatChoice | None:
    """The response as the chat choice that stands for it in the response cache, which a hit makes
    a response again (answer.py `response_from_chat`, stream.py): its text, refusal and calls (their
    call ids kept); None when it holds what a chat choice cannot (a reasoning item, the vendor's
    opaque state) or did not end well (failed, or incomplete for no reason chat has)."""
    output = response["output"]
    if any(item["type"] == "reasoning" for item in output):
        return None
    if response["status"] == "completed":
        finish = "stop"
    elif response["status"] == "incomplete" and (response.get("incomplete_details") or {}).get("reason") in FINISH:
        finish = FINISH[response["incomplete_details"]["reason"]]
    else:
        return None
    parts = [part for item in output if item["type"] == "message" for part in item["content"]]
    calls = [{"id": item["call_id"], "type": "function",
              "function": {"name": item["name"], "arguments": item["arguments"]}}
             for item in output if item["type"] == "function_call"]
    refusals = [part["refusal"] for part in parts if part["type"] == "refusal"]
    return ChatChoice(0, "".join(part["text"] for part in parts if part["type"] == "output_text"),
                      "tool_calls" if calls and finish == "stop" else finish,
                      refusal="".join(refusals) if refusals else None, tool_calls=calls or None)


def unmet(request: dict[str, Any], response: dict[str, Any], schema: Any = None) -> str | None:
    """What a completed response did not do that the request asked of the vendor (None: nothing),
    as planner/verify.py holds a chat answer: a forced tool called (`tool_choice` "required", or
    the function it names), every call's arguments JSON, and the text the JSON `text.format` asked
    for (matching a strict schema: `schema`, its compiled validator). A vendor may take a field and
    answer as if it had not; a client that forced a call runs it."""
    if response["status"] != "completed":
        return None  # cut short (max_output_tokens, a filter): passed on as what it says it is
    calls = [item for item in response["output"] if item["type"] == "function_call"]
    for call in calls:
        try:
            orjson.loads(call.get("arguments") or "{}")
        except orjson.JSONDecodeError:
            return "called a tool with arguments that are not JSON"
    choice = request.get("tool_choice") if request.get("tools") else None
    if choice == "required" and not calls:
        return 'answered without calling a tool although tool_choice was "required"'
    if isinstance(choice, dict) and choice.get("name") not in {call["name"] for call in calls}:
        return f"answered without calling {choice.get('name')} although tool_choice named it"
    kind = answer_format(request).get("type")
    if kind not in ("json_object", "json_schema") or calls:
        return None
    try:
        value = orjson.loads(output_text(response))
    except orjson.JSONDecodeError:
        return "answered text that is not the JSON text.format asked for"
    if kind == "json_object" and not isinstance(value, dict):
        return "answered JSON that is not an object, as json_object asks"
    if schema is not None and not schema.is_valid(value):
        return "answered JSON that does not match the strict json_schema asked for"
    return None


def _followed(item: dict[str, Any]) -> dict[str, Any]:
    """An item as a stream keeps it to follow its deltas: its own dict and content list and parts
    (what the deltas change), apart from the event that showed it, which is written as it was."""
    held = dict(item)
    if isinstance(held.get("content"), list):
        held["content"] = [dict(part) for part in held["content"]]
    return held


class NativeStream:
    """The vendor's Responses events, kept to the contract and renumbered, ending exactly once."""

    def __init__(self, request: dict[str, Any], *, response_id: str, created_at: int, model: str) -> None:
        self._request, self._id, self._created, self._model = request, response_id, created_at, model
        self._sequence = 0
        self._items: dict[int, dict[str, Any]] = {}  # output_index -> the item as far as it went
        self._open: set[int] = set()
        self._usage: dict[str, Any] | None = None
        self.response: dict[str, Any] | None = None  # the terminal event's, once sent
        self.ended = False

    def _event(self, kind: str, **fields: Any) -> dict[str, Any]:
        event = {"type": kind, "sequence_number": self._sequence, **fields}
        self._sequence += 1
        return event

    def start(self) -> list[dict[str, Any]]:
        return []  # the vendor's own `response.created` and `response.in_progress` begin it

    def _response(self, answer: dict[str, Any]) -> dict[str, Any]:
        return from_native(answer, self._request, response_id=self._id, created_at=self._created, model=self._model)

    def feed(self, event: dict[str, Any]) -> list[dict[str, Any]]:
        """The events to send for one of the vendor's (none for one the contract does not name)."""
        kind = event.get("type")
        if self.ended or kind not in EVENTS:
            return []
        if kind in TERMINAL:
            self.ended = True
            self.response = self._response(event["response"])
            return [self._event(kind, response=self.response)]  # (nothing changes it once ended)
        if "response" in event:
            return [self._event(kind, response=self._response(event["response"]))]
        fields = {name: event[name] for name in EVENT_FIELDS if name in event}
        index = event.get("output_index")
        if "item" in event:
            if index not in self._items and len(self._items) == MAX_OUTPUT_ITEMS:
                raise Unexpected(f"more than {MAX_OUTPUT_ITEMS} output items")
            fields["item"] = item(event["item"])
            self._items[index] = _followed(fields["item"])
            (self._open.add if kind.endswith(".added") else self._open.discard)(index)
        if "part" in event:
            fields["part"] = _part(event["part"]) if event["part"].get("type") in PARTS else \
                {"type": "summary_text", "text": event["part"].get("text", "")}
        self._follow(kind, index, fields)
        return [self._event(kind, **fields)]

    def _follow(self, kind: str, index: int | None, fields: dict[str, Any]) -> None:
        """Keep the open item as far as the deltas went, for an end the vendor does not send."""
        held = self._items.get(index) if index is not None else None
        if held is None:
            return
        if kind == "response.content_part.added" and held["type"] == "message":
            held["content"].append(dict(fields["part"]))
        elif kind == "response.output_text.delta" and held["type"] == "message" and held["content"]:
            held["content"][-1]["text"] += fields.get("delta", "")
        elif kind == "response.refusal.delta" and held["type"] == "message" and held["content"]:
            held["content"][-1]["refusal"] += fields.get("delta", "")
        elif kind == "response.function_call_arguments.delta" and held["type"] == "function_call":
            held["arguments"] += fields.get("delta", "")

    def end(self, *, error: dict[str, str] | None = None, client_left: bool = False,
            usage: dict[str, Any] | None = None) -> list[dict[str, Any]]:
        """After the vendor's stream: nothing when its terminal event came; else every open item
        closed `incomplete` and one terminal event, `failed` unless the client left (as
        `ResponseStream.end`; `usage` in chat's shape, the caller's count)."""
        if self.ended:
            return []
        self.ended = True
        events = []
        for index in sorted(self._open):
            self._items[index]["status"] = "incomplete"
            events.append(self._event("response.output_item.done", output_index=index,
                                      item=self._items[index]))  # (closed: nothing changes it after)
        if error is None and not client_left:
            error = {"code": "server_error", "message": "the vendor's stream ended before its answer did"}
        status = "failed" if error is not None else "incomplete"
        made = shell(self._request, response_id=self._id, created_at=self._created, model=self._model, status=status)
        made["output"] = [self._items[i] for i in sorted(self._items)]
        made["usage"] = usage_from_chat(usage)
        if error is not None:
            made["error"] = error_value(error)
        else:
            made["incomplete_details"] = {"reason": None}
        self.response = made
        events.append(self._event(f"response.{status}", response=made))
        return events
