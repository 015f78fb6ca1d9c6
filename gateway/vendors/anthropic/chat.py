"""Chat on Anthropic's Messages API: OpenAI's chat request in the Messages shape, and the message
(or its stream of events) back as OpenAI's choice. vendors/anthropic/adapter.py holds it as its
chat translator; what both endpoints read alike is vendors/anthropic/messages.py.

The request:
- system and developer messages become the top-level `system` (joined by blank lines, in their
  order; the Messages API has no system turns inside the conversation);
- user, assistant and tool messages become turns of content blocks, consecutive turns of one
  role merged into one (the API wants them alternating), starting with the user's: text parts as
  text blocks (those of whitespace only left out: the API refuses them), images as image blocks (a
  `data:` URL's base64 as a base64 source, an http(s) URL as a url source), an assistant's tool
  calls as tool_use blocks (their arguments, which must be a JSON object, as the input), a tool
  message as a tool_result block of a user turn; a final assistant turn (a prefill the reply
  continues) without its trailing whitespace, which the API refuses;
- `tools` as tools with an `input_schema`, `tool_choice` as none / auto / any (`required`) /
  `{type: tool, name}`, `parallel_tool_calls: false` as `disable_parallel_tool_use`;
- `stop` as `stop_sequences`, `temperature` ([0, 1] on this API), `top_p`, `top_k`, `user` as
  `metadata.user_id`; `max_completion_tokens` (else `max_tokens`) as `max_tokens`, which the API
  requires: without either, core/chat.py's DEFAULT_MAX_TOKENS (what the limits reserve too).
`response_format` json_object / json_schema is asked the way Anthropic documents JSON output: as
the one tool the model must call (`tool_choice: {type: tool}`), whose `input_schema` is the
schema (an object; json_object: any object); its input is the answer's content, and a forced call
has no text besides. The deprecated functions are tools of one call at a time
(vendors/conversation.py `with_tools`). `n` is fanned out by the planner (one call per choice). What the API lacks is
refused by name (`CHAT`): a participant's `name`, log probabilities,
penalties, seeds, audio, predicted outputs, stored completions; JSON output together with tools.

The answer: text blocks are the content, tool_use blocks the tool calls (input as JSON
arguments); a stream's text deltas are content deltas and a tool_use block is one tool call
delta with its id and name (indexed among the message's tool calls, not its blocks), then its
input_json_delta fragments as argument deltas. Stop reasons map to finish reasons
(`tool_use` -> `tool_calls`), and the usage counts cache reads and writes.
"""

from __future__ import annotations

import re
from collections.abc import AsyncIterator
from typing import Any

from gateway.core.chat import DEFAULT_MAX_TOKENS, ChatCall, ChatChoice, content_text
from gateway.core.completion import Chunk, Result, Usage
from gateway.core.errors import VendorFailed
from gateway.core.parameters import CHAT_PARAMETERS, Capabilities, Range, Support, emulated, native, unsupported
from gateway.vendors.anthropic import messages as wire
from gateway.vendors import conversation
from gateway.vendors import untrusted as read
from gateway.vendors.anthropic.messages import MESSAGES
from gateway.vendors.openai.chat import CALLER_KEY, MAX_NAME, MAX_TOOL_CALLS
from gateway.vendors.transport.http import HttpAdapter

CHAT_FINISH = wire.FINISH | {"tool_use": "tool_calls"}
JSON_FINISH = wire.FINISH | {"tool_use": "stop"}  # the forced tool call of a JSON answer is its content
JSON_OBJECT_TOOL = "json_answer"  # the forced tool of `response_format: json_object`
# The image types the Messages API reads (its base64 source's media_type).
IMAGE_TYPES = frozenset({"image/jpeg", "image/png", "image/gif", "image/webp"})
_DATA_URL = re.compile(r"^data:(?P<type>[\w.+-]+/[\w.+-]+);base64,(?P<data>.*)$", re.DOTALL)
_REFUSED = {
    "audio": "the Messages API answers in text only",
    "modalities": "the Messages API answers in text only",
    "prediction": "the Messages API has no predicted outputs",
    "frequency_penalty": "the Messages API has no repetition penalties",
    "presence_penalty": "the Messages API has no repetition penalties",
    "logit_bias": "the Messages API has no token biasing",
    "logprobs": "the Messages API returns no token log probabilities",
    "top_logprobs": "the Messages API returns no token log probabilities",
    "seed": "the Messages API has no sampling seed",
    "metadata": "the Messages API's metadata takes only a user id (given by `user`), not tags",
    "store": "Anthropic stores no completions to retrieve later",
    "reasoning_effort": "extended thinking (a token budget, not an effort level) is not mapped",
    "x-openai-api-key": CALLER_KEY,
}


def _capabilities() -> Capabilities:
    support: dict[str, Support] = {}
    for name in CHAT_PARAMETERS:
        if name in _REFUSED:
            support[name] = unsupported(_REFUSED[name])
        elif name == "n":
            support[name] = emulated()  # one Messages call per choice (planner/plan.py)
        elif name == "temperature":
            support[name] = native(range=Range(0, 1))
        else:
            support[name] = native()
    return Capabilities.chat("anthropic", support)


CHAT = _capabilities()


def refused(call: ChatCall) -> tuple[str, str] | None:
    """What of the request the Messages API cannot be given: (parameter, why), or None."""
    format_ = call.parameters.get("response_format") or {}
    if json_tool(call) is not None:
        if call.parameters.get("tools"):
            return "response_format", ("JSON output on the Messages API is a forced tool call, which leaves the "
                                       "request's own tools uncallable")
        schema = (format_.get("json_schema") or {}).get("schema") or {"type": "object"}
        if schema.get("type") != "object":
            return "response_format", ("JSON output on the Messages API is a tool's input, an object: the schema's "
                                       "top level must be `type: object`")
    if (found := conversation.refused(call.messages, "the Messages API", _image_problem)) is not None:
        return found
    turns = conversation.system_and_turns(call.messages, _blocks, "assistant", "content")[1]
    if not turns:
        return "messages", "only system messages, or empty ones: the Messages API needs a turn to answer"
    if turns[0]["role"] == "assistant":
        return "messages", "the Messages API's conversation starts with the user's turn (after the system messages)"
    return None


def json_tool(call: ChatCall) -> str | None:
    """The name of the tool a JSON answer is asked through, or None when the call asks for text."""
    format_ = call.parameters.get("response_format") or {}
    if format_.get("type") == "json_schema":
        return format_["json_schema"]["name"]
    return JSON_OBJECT_TOOL if format_.get("type") == "json_object" else None


def chat_payload(call: ChatCall) -> dict[str, Any]:
    """The Messages request of a chat call (whose values `refused` found nothing to refuse in)."""
    system, turns = conversation.system_and_turns(call.messages, _blocks, "assistant", "content")
    if turns[-1]["role"] == "assistant":
        _end_prefill(turns)
    given = call.parameters
    payload: dict[str, Any] = {"model": call.model, "max_tokens": call.max_tokens or DEFAULT_MAX_TOKENS,
                               "messages": turns}
    if system:
        payload["system"] = system
    stop = given.get("stop")
    if stop is not None:
        payload["stop_sequences"] = [stop] if isinstance(stop, str) else stop
    for name in ("temperature", "top_p", "top_k"):
        if given.get(name) is not None:
            payload[name] = given[name]
    if given.get("user") is not None:
        payload["metadata"] = {"user_id": given["user"]}
    if (forced := json_tool(call)) is not None:
        described = given["response_format"].get("json_schema") or {}
        payload["tools"] = [{"name": forced, "description": described.get("description") or "Answer with this JSON.",
                             "input_schema": described.get("schema") or {"type": "object"}}]
        payload["tool_choice"] = {"type": "tool", "name": forced}
    tools = given.get("tools")
    if tools:
        payload["tools"] = [_tool(tool["function"]) for tool in tools]
        choice = _tool_choice(given.get("tool_choice"))
        if given.get("parallel_tool_calls") is False and choice["type"] != "none":
            choice["disable_parallel_tool_use"] = True
        if choice != {"type": "auto"}:
            payload["tool_choice"] = choice
    if call.stream:
        payload["stream"] = True
    return payload


def _end_prefill(turns: list[dict[str, Any]]) -> None:
    """A final assistant turn is a prefill the reply continues, which the API refuses when it ends in
    whitespace: its last text block is sent without it (and not at all when nothing is left)."""
    blocks = turns[-1]["content"]
    if blocks[-1]["type"] == "text":
        blocks[-1]["text"] = blocks[-1]["text"].rstrip()
        if not blocks[-1]["text"]:
            blocks.pop()
    if not blocks:
        turns.pop()


def _blocks(message: dict[str, Any]) -> list[dict[str, Any]]:
    content = message.get("content")
    if message["role"] == "tool":
        result: dict[str, Any] = {"type": "tool_result", "tool_use_id": message["tool_call_id"]}
        if (text := content_text(content)).strip():
            result["content"] = text
        return [result]
    blocks: list[dict[str, Any]] = []
    # (the API refuses text blocks of whitespace only)
    if isinstance(content, str):
        if content.strip():
            blocks.append({"type": "text", "text": content})
    else:
        for part in content or ():
            if part["type"] == "image_url":
                blocks.append(_image(part["image_url"]["url"]))
            elif (text := part.get("text") or part.get("refusal")) and text.strip():
                blocks.append({"type": "text", "text": text})
    for tool_call in message.get("tool_calls") or ():
        function = tool_call["function"]
        blocks.append({"type": "tool_use", "id": tool_call["id"], "name": function["name"],
                       "input": conversation.arguments(function["arguments"])})
    return blocks


def _image_problem(url: str) -> str | None:
    if url.startswith(("http://", "https://")):
        return None
    found = _DATA_URL.match(url)
    if found is None:
        return "an image must be an http(s) URL or a base64 data: URL"
    if found["type"] not in IMAGE_TYPES:
        return f"the Messages API takes images of the types {', '.join(sorted(IMAGE_TYPES))}, not {found['type']}"
    return None  # (its base64 is checked for every vendor alike: endpoints/chat/rules.py)


def _image(url: str) -> dict[str, Any]:
    found = _DATA_URL.match(url)
    if found is None:
        return {"type": "image", "source": {"type": "url", "url": url}}
    return {"type": "image", "source": {"type": "base64", "media_type": found["type"], "data": found["data"]}}


def _tool(function: dict[str, Any]) -> dict[str, Any]:
    tool: dict[str, Any] = {"name": function["name"],
                            "input_schema": function.get("parameters") or {"type": "object", "properties": {}}}
    if function.get("description"):
        tool["description"] = function["description"]
    return tool


def _tool_choice(choice: Any) -> dict[str, Any]:
    if isinstance(choice, dict):
        return {"type": "tool", "name": choice["function"]["name"]}
    return {"type": {"none": "none", "required": "any"}.get(choice, "auto")}


def read_chat_message(data: Any, json_answer: str | None = None) -> Result:
    """A non-streamed Message as one chat choice, the input of the tool named `json_answer` (the
    forced call of a JSON answer) as its content; untrusted.Malformed when it is not one."""
    data, blocks = wire.message_blocks(data)
    texts, calls = [], []
    for block in blocks:
        kind = block.get("type")
        if kind == "text":
            texts.append(read.text(block.get("text"), "a text block's text"))
        elif kind == "tool_use":
            if len(calls) == MAX_TOOL_CALLS:
                raise read.Malformed(f"a message has more than {MAX_TOOL_CALLS} tool calls")
            arguments = conversation.arguments_text(read.obj(block.get("input"), "a tool_use's input"))
            calls.append(_call(block) | {"function": {"name": _name(block), "arguments": arguments}})
        # thinking blocks (and block types added later) are not the answer's content
    text = "".join(texts)
    if json_answer is not None:
        text = next((c["function"]["arguments"] for c in calls if c["function"]["name"] == json_answer), text)
        calls = [c for c in calls if c["function"]["name"] != json_answer]
    finish = wire.finish_reason(data.get("stop_reason"), CHAT_FINISH if json_answer is None else JSON_FINISH)
    choice = ChatChoice(0, text, finish, tool_calls=calls or None)
    return Result([choice], wire.usage(read.obj(data["usage"], "usage")))


def _call(block: dict[str, Any]) -> dict[str, Any]:
    call_id = read.text(block.get("id"), "a tool_use's id", MAX_NAME)
    if not call_id:
        raise read.Malformed("a tool_use has no id")
    return {"id": call_id, "type": "function"}


def _name(block: dict[str, Any]) -> str:
    name = read.text(block.get("name"), "a tool_use's name", MAX_NAME)
    if not name:
        raise read.Malformed("a tool_use has no name")
    return name


class ChatEvents(wire.Events):
    """A Messages stream as chat chunks of one choice; the input of the tool named `json_answer`
    (the forced call of a JSON answer) as content deltas."""

    def __init__(self, json_answer: str | None = None) -> None:
        super().__init__()
        self.finish = CHAT_FINISH if json_answer is None else JSON_FINISH
        self._json_answer = json_answer
        # a tool_use block's index: [its tool call's index (None: the JSON answer), arguments sent]
        self._tools: dict[int, list[Any]] = {}

    def content(self, kind: str, event: dict[str, Any]) -> Chunk | None:
        block_index = read.count(event.get("index"), "a content block's index")
        if kind == "content_block_start":
            block = read.obj(event.get("content_block"), "a content block")
            if block.get("type") == "tool_use":
                if len(self._tools) == MAX_TOOL_CALLS:
                    raise read.Malformed(f"a message has more than {MAX_TOOL_CALLS} tool calls")
                given = read.obj(block.get("input"), "a tool_use's input")
                arguments = conversation.arguments_text(given) if given else ""
                name = _name(block)
                if name == self._json_answer:
                    self._tools[block_index] = [None, bool(arguments)]
                    return _piece(arguments) if arguments else None
                index = sum(1 for tool in self._tools.values() if tool[0] is not None)
                self._tools[block_index] = [index, bool(arguments)]
                return _piece(text="", tool={"index": index, **_call(block),
                                             "function": {"name": name, "arguments": arguments}})
            if block.get("type") == "text" and (text := read.text(block.get("text"), "a text block's text")):
                return _piece(text)
            return None
        tool = self._tools.get(block_index)
        if kind == "content_block_stop":
            if tool is not None and not tool[1]:  # a call without input: its arguments are an empty object
                tool[1] = True
                return _fragment(tool[0], "{}")
            return None
        delta = read.obj(event.get("delta"), "a delta")
        if delta.get("type") == "text_delta":
            text = read.text(delta.get("text"), "a delta's text")
            # (a forced call has no text besides; were there any, it would not be the JSON asked for)
            return _piece(text) if text and self._json_answer is None else None
        if delta.get("type") == "input_json_delta":
            if tool is None:
                raise read.Malformed("an input_json_delta outside a tool_use block")
            fragment = read.text(delta.get("partial_json"), "a delta's partial_json")
            if not fragment:
                return None
            tool[1] = True
            return _fragment(tool[0], fragment)
        return None  # thinking and signature deltas, and delta types added later

    def last(self, finish: str, usage: Usage) -> Chunk:
        return Chunk([ChatChoice(0, "", finish)], usage)


def _piece(text: str, tool: dict[str, Any] | None = None) -> Chunk:
    return Chunk([ChatChoice(0, text, tool_calls=None if tool is None else [tool])])


def _fragment(tool_index: int | None, arguments: str) -> Chunk:
    """A piece of a tool call's arguments, or of the JSON answer's content (`tool_index` None)."""
    return _piece(arguments) if tool_index is None else _piece("", {"index": tool_index,
                                                                   "function": {"arguments": arguments}})


class AnthropicChat:
    """The chat translator of Anthropic's Messages API (POST /v1/messages): a conversation
    translated both ways (vendors/conversation.py), tools and tool calls included."""

    def __init__(self, adapter: HttpAdapter, capabilities: Capabilities) -> None:
        self._adapter = adapter
        self.capabilities = capabilities


    def refused(self, call: ChatCall) -> tuple[str, str] | None:
        return refused(conversation.with_tools(call))

    async def complete(self, call: ChatCall) -> Result:
        asked = conversation.with_tools(call)  # (the deprecated functions, as tools)
        result = await self._adapter._post_json(MESSAGES, chat_payload(asked), call,
                                       lambda data: self._chat_message(data, json_tool(asked)))
        return result if asked is call else conversation.function_call_result(self._adapter.name, result)

    def _chat_message(self, data: Any, json_answer: str | None) -> Result:
        try:
            return read_chat_message(data, json_answer)
        except read.READ_ERRORS as exc:
            raise VendorFailed(f"vendor '{self._adapter.name}' sent a malformed message: {read.why(exc)}",
                               vendor=self._adapter.name) from None

    def stream(self, call: ChatCall) -> AsyncIterator[list[Chunk]]:
        asked = conversation.with_tools(call)
        chunks = self._adapter._sse_chunks(MESSAGES, chat_payload(asked), call,
                                  lambda: wire.MessageStream(self._adapter._config, ChatEvents(json_tool(asked))))
        return chunks if asked is call else conversation.function_call_chunks(self._adapter.name, chunks)
