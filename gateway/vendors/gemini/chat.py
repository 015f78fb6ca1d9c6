"""Chat on Gemini's generateContent: OpenAI's chat request as `contents` of `parts`, and candidates
(whole, or a stream's events) back as OpenAI's choices. vendors/gemini/adapter.py holds it as its
chat translator; what both endpoints read alike is vendors/gemini/wire.py.

The request:
- system and developer messages become `systemInstruction` (joined by blank lines);
- user and tool messages become `user` turns, assistant messages `model` turns, consecutive turns
  of one role merged: text parts as text parts (empty ones dropped), images as `inlineData` (from
  a base64 `data:` URL; Gemini reads no image URL the gateway would have to fetch, so an http(s)
  URL is refused), an assistant's tool calls as `functionCall` parts (their arguments, a JSON
  object, as `args`), a tool message as a `functionResponse` part named after the call it
  answers, its content as `response.content`;
- `tools` as `functionDeclarations` whose `parametersJsonSchema` is the tool's JSON Schema as it
  is, `tool_choice` as `toolConfig.functionCallingConfig` (NONE, AUTO, ANY; a named function is
  ANY with `allowedFunctionNames`);
- `response_format` json_object as `responseMimeType: application/json`, json_schema with the
  schema as `responseJsonSchema` (JSON Schema as it is; `responseSchema` would take only Gemini's
  OpenAPI subset). The answer is held to it (planner/verify.py): content that does not
  parse is the vendor's failure (502);
- `n` as `candidateCount` (up to `max_candidates` per call; the planner fans more out), `stop` as
  `stopSequences`, `max_completion_tokens` (else `max_tokens`) as `maxOutputTokens`,
  `temperature`, `top_p`, `top_k`, `seed` (wrapped into int32), penalties, and `logprobs` /
  `top_logprobs` as `responseLogprobs` / `logprobs`, `reasoning_effort` none / low / medium / high
  as a `thinkingConfig.thinkingBudget` of 0 / 1024 / 8192 / 24576 tokens (Google's own mapping).

The answer: a candidate's text parts (not its thoughts) are the content, its `functionCall` parts
tool calls (`args` as JSON arguments; the call's `id` when Gemini gives one, else `call_<k>`, with
the call's thoughtSignature after a "~", which comes back to Gemini with the call),
whole in one delta when streamed (Gemini does not split them), and a candidate that called a tool
and stopped finishes with `tool_calls`; one that ended with a malformed call is the vendor's failure
(502). Usage is usageMetadata's.
"""

from __future__ import annotations

import re
from collections.abc import AsyncIterator
from typing import Any

from gateway.core.chat import ChatCall, ChatChoice, content_text
from gateway.core.completion import Choice, Chunk, Result
from gateway.core.parameters import CHAT_PARAMETERS, Capabilities, Support, emulated, native, unsupported
from gateway.vendors import conversation, logprobs
from gateway.vendors.gemini import wire
from gateway.vendors import untrusted as read
from gateway.vendors.gemini.wire import GeminiOptions
from gateway.vendors.openai.chat import CALLER_KEY, MAX_NAME, MAX_TOOL_CALLS
from gateway.vendors.transport.http import HttpAdapter

_FUNCTION_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_.-]{0,63}$")  # FunctionDeclaration.name
_DATA_URL = re.compile(r"^data:(?P<type>image/[\w.+-]+);base64,(?P<data>.*)$", re.DOTALL)
_REFUSED = {
    "audio": "the gateway maps Gemini's text answers only",
    "modalities": "the gateway maps Gemini's text answers only",
    "prediction": "generateContent has no predicted outputs",
    "logit_bias": "generateContent has no token biasing",
    "parallel_tool_calls": "generateContent has no switch for parallel function calls",
    "metadata": "generateContent has no request tags",
    "store": "Gemini stores no completions to retrieve later",
    "x-openai-api-key": CALLER_KEY,
}
_MODES = {"none": "NONE", "auto": "AUTO", "required": "ANY"}
# reasoning_effort as a thinking budget, as Google maps it for its own OpenAI-compatible endpoint
# (none: no thinking, which only some models allow); the other efforts have no documented budget.
THINKING_BUDGETS = {"none": 0, "low": 1024, "medium": 8192, "high": 24576}
# Gemini 3 gives a function call a thoughtSignature it must get back with the call in later turns;
# OpenAI's shape has no place for it but the call's id, which clients send back as they got it:
# "<id>~<signature>" ("~" is in no base64 alphabet). A longer signature is a malformed answer.
SIGNED = "~"
MAX_SIGNATURE = 64 << 10
# Finish reasons of a function call Gemini could not make (the answer has none to give).
MALFORMED_CALLS = frozenset({"MALFORMED_FUNCTION_CALL", "UNEXPECTED_TOOL_CALL"})


def chat_capabilities(options: GeminiOptions) -> Capabilities:
    candidates = options.max_candidates
    support: dict[str, Support] = {}
    for name in CHAT_PARAMETERS:
        if name in _REFUSED:
            support[name] = unsupported(_REFUSED[name])
        elif name == "n":
            support[name] = native(per_call=candidates) if candidates > 1 else emulated()
        elif name == "user":
            support[name] = emulated()  # generateContent has no end-user field: recorded in the ledger only
        else:
            support[name] = native()
    return Capabilities.chat("gemini", support)


def refused(call: ChatCall) -> tuple[str, str] | None:
    """What of the conversation generateContent cannot be given: (parameter, why), or None."""
    called: set[str] = set()  # the tool calls of the messages so far

    def unanswerable(message: dict[str, Any]) -> str | None:
        called.update(tool_call["id"] for tool_call in message.get("tool_calls") or ())
        if message["role"] == "tool" and message["tool_call_id"] not in called:
            return "answers no tool call of an earlier assistant message (Gemini names the function a result is for)"
        return None

    for tool in call.parameters.get("tools") or ():
        if not _FUNCTION_NAME.match(tool["function"]["name"]):
            return "tools", f"Gemini's function names start with a letter or an underscore: {tool['function']['name']}"
    effort = call.parameters.get("reasoning_effort")
    if effort is not None and effort not in THINKING_BUDGETS:
        return "reasoning_effort", (f"Gemini's thinking budgets are documented for {', '.join(THINKING_BUDGETS)} "
                                    f"only, not {effort}")
    if (found := conversation.refused(call.messages, "generateContent", _image_problem, unanswerable)) is not None:
        return found
    names: dict[str, str] = {}
    if not conversation.system_and_turns(call.messages, lambda message: _parts(message, names), "model", "parts")[1]:
        return "messages", "only system messages, or empty ones: generateContent needs contents to answer"
    return None


def _image_problem(url: str) -> str | None:
    return None if _DATA_URL.match(url) else "Gemini takes images inline: give a base64 data:image/... URL"


def chat_payload(call: ChatCall) -> dict[str, Any]:
    """The GenerateContentRequest of a chat call (whose values `refused` found nothing to refuse in)."""
    names: dict[str, str] = {}  # a tool call's id: its function's name (what a functionResponse names)
    system, contents = conversation.system_and_turns(call.messages, lambda message: _parts(message, names), "model",
                                                     "parts")
    given = call.parameters
    payload: dict[str, Any] = {"contents": contents}
    if system:
        payload["systemInstruction"] = {"parts": [{"text": system}]}
    config: dict[str, Any] = {}
    if call.max_tokens is not None:
        config["maxOutputTokens"] = call.max_tokens
    if call.n > 1:
        config["candidateCount"] = call.n
    stop = given.get("stop")
    if stop is not None:
        config["stopSequences"] = [stop] if isinstance(stop, str) else stop
    for name, field in (("temperature", "temperature"), ("top_p", "topP"), ("top_k", "topK"),
                        ("presence_penalty", "presencePenalty"), ("frequency_penalty", "frequencyPenalty")):
        if given.get(name) is not None:
            config[field] = given[name]
    if given.get("seed") is not None:
        config["seed"] = wire.int32_seed(given["seed"])
    if given.get("logprobs"):
        config["responseLogprobs"] = True
        if given.get("top_logprobs") is not None:
            config["logprobs"] = given["top_logprobs"]
    format_ = given.get("response_format") or {}
    if format_.get("type") in ("json_object", "json_schema"):
        config["responseMimeType"] = "application/json"
        if format_["type"] == "json_schema" and "schema" in format_["json_schema"]:
            config["responseJsonSchema"] = format_["json_schema"]["schema"]
    if given.get("reasoning_effort") is not None:
        config["thinkingConfig"] = {"thinkingBudget": THINKING_BUDGETS[given["reasoning_effort"]]}
    if config:
        payload["generationConfig"] = config
    tools = given.get("tools")
    if tools:
        payload["tools"] = [{"functionDeclarations": [_declaration(tool["function"]) for tool in tools]}]
        choice = given.get("tool_choice")
        if choice is not None:
            calling: dict[str, Any] = {"mode": "ANY" if isinstance(choice, dict) else _MODES[choice]}
            if isinstance(choice, dict):
                calling["allowedFunctionNames"] = [choice["function"]["name"]]
            payload["toolConfig"] = {"functionCallingConfig": calling}
    return payload


def _parts(message: dict[str, Any], names: dict[str, str]) -> list[dict[str, Any]]:
    content = message.get("content")
    if message["role"] == "tool":
        response = {"name": names[message["tool_call_id"]], "response": {"content": content_text(content)}}
        return [{"functionResponse": response}]
    parts: list[dict[str, Any]] = []
    if isinstance(content, str):
        if content:
            parts.append({"text": content})
    else:
        for part in content or ():
            if part["type"] == "image_url":
                found = _DATA_URL.match(part["image_url"]["url"])
                assert found is not None  # refused() let only data: URLs through
                parts.append({"inlineData": {"mimeType": found["type"], "data": found["data"]}})
            elif text := part.get("text") or part.get("refusal"):
                parts.append({"text": text})
    for tool_call in message.get("tool_calls") or ():
        function = tool_call["function"]
        names[tool_call["id"]] = function["name"]
        call = {"functionCall": {"name": function["name"], "args": conversation.arguments(function["arguments"])}}
        if signature := tool_call["id"].partition(SIGNED)[2]:
            call["thoughtSignature"] = signature  # what Gemini gave with the call, back where it was
        parts.append(call)
    return parts


def _declaration(function: dict[str, Any]) -> dict[str, Any]:
    declaration: dict[str, Any] = {"name": function["name"]}
    if function.get("description"):
        declaration["description"] = function["description"]
    if function.get("parameters"):
        declaration["parametersJsonSchema"] = function["parameters"]
    return declaration


class ChatReader(wire.Reader):
    """Candidates as chat choices: text, function calls (in a stream, as deltas indexed per
    candidate), chat-shaped logprobs."""

    blocked = ChatChoice

    def __init__(self, call: ChatCall, streamed: bool) -> None:
        super().__init__(call.n)
        self._streamed = streamed
        self._top = logprobs.chat_alternatives(call.parameters)
        self._calls = [0] * call.n  # function calls so far per candidate

    def choice(self, index: int, parts: list[dict[str, Any]], finish: str, candidate: dict[str, Any]) -> Choice:
        if finish in MALFORMED_CALLS:  # the model's call came out broken: no answer, and not a stop
            raise read.Malformed(f"the candidate ended with {finish}")
        calls = []
        for part in parts:
            if part.get("functionCall") is None:
                continue
            function = read.obj(part["functionCall"], "a functionCall")
            name = read.text(function.get("name"), "a functionCall's name", MAX_NAME)
            if not name:
                raise read.Malformed("a functionCall has no name")
            number = self._calls[index]
            if number == MAX_TOOL_CALLS:
                raise read.Malformed(f"a candidate has more than {MAX_TOOL_CALLS} function calls")
            self._calls[index] += 1
            given_id = function.get("id")
            call_id = "" if given_id is None else read.text(given_id, "a functionCall's id", MAX_NAME)
            call_id = call_id.replace(SIGNED, "") or f"call_{number}"
            if (signature := part.get("thoughtSignature")) is not None:
                signature = read.text(signature, "a thoughtSignature", MAX_SIGNATURE)
                call_id = f"{call_id}{SIGNED}{signature}" if signature else call_id
            arguments = conversation.arguments_text(read.obj(function.get("args"), "a functionCall's args"))
            call: dict[str, Any] = {"id": call_id, "type": "function",
                                    "function": {"name": name, "arguments": arguments}}
            calls.append({"index": number, **call} if self._streamed else call)
        reason = wire.finish_reason(finish)
        if reason == "stop" and self._calls[index]:
            reason = "tool_calls"
        choice = ChatChoice(index, wire.answer_text(parts), reason, tool_calls=calls or None)
        if self._top is not None:
            choice.logprobs = _logprobs(read.obj(candidate.get("logprobsResult"), "logprobsResult"), self._top)
        return choice


def _logprobs(result: dict[str, Any], top: int) -> dict[str, Any]:
    chosen, steps = wire.chosen_and_top(result)
    content = []
    for i, (token, logprob) in enumerate(chosen):
        alternatives = wire.top_candidates(steps[i], top) if i < len(steps) and top else []
        content.append({"token": token, "logprob": logprob, "bytes": list(token.encode()),
                        "top_logprobs": [{"token": t, "logprob": lp, "bytes": list(t.encode())}
                                         for t, lp in alternatives]})
    return {"content": content, "refusal": None}


class GeminiChat:
    """The chat translator of Gemini's generateContent: a conversation translated both ways
    (vendors/conversation.py), tools and function calls included."""

    def __init__(self, adapter: HttpAdapter, capabilities: Capabilities) -> None:
        self._adapter = adapter
        self.capabilities = capabilities


    def refused(self, call: ChatCall) -> tuple[str, str] | None:
        return refused(conversation.with_tools(call))

    async def complete(self, call: ChatCall) -> Result:
        asked = conversation.with_tools(call)  # (the deprecated functions, as tools)
        result = await self._adapter._post_json(wire.url(call.model, "generateContent"), chat_payload(asked),
                                       call, lambda data: self._chat_answer(data, asked))
        return result if asked is call else conversation.function_call_result(self._adapter.name, result)

    def _chat_answer(self, data: Any, call: ChatCall) -> Result:
        return wire.answer(self._adapter.name, ChatReader(call, streamed=False), data)

    def stream(self, call: ChatCall) -> AsyncIterator[list[Chunk]]:
        asked = conversation.with_tools(call)
        url = wire.url(call.model, "streamGenerateContent") + "?alt=sse"
        chunks = self._adapter._sse_chunks(url, chat_payload(asked), call,
                                  lambda: wire.Stream(self._adapter.name, ChatReader(asked, streamed=True)))
        return chunks if asked is call else conversation.function_call_chunks(self._adapter.name, chunks)
