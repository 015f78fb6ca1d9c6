"""A fake Gemini API (`POST /v1beta/models/{model}:generateContent` and
`:streamGenerateContent?alt=sse`) that checks each request against the documented shape and
records it.

Shapes follow the Gemini API reference (ai.google.dev/api/generate-content): GenerateContentRequest
(`contents`, `generationConfig` with stopSequences "up to 5", temperature [0, 2], candidateCount,
responseLogprobs + logprobs [0, 20], "only valid if responseLogprobs=True"), GenerateContentResponse
(candidates with content.parts[].text, finishReason, index, logprobsResult with chosenCandidates
and topCandidates; promptFeedback.blockReason; usageMetadata), a stream of GenerateContentResponse
objects as SSE `data:` lines with no end marker, and the error body `{"error": {"code", "message",
"status"}}` (an invalid key is 400 INVALID_ARGUMENT with reason API_KEY_INVALID). A request that
breaks the shape is answered 400 INVALID_ARGUMENT and listed in `violations`.

Candidate i writes tokens " <tag>w0", " <tag>w1", ... up to maxOutputTokens, cut before the first
stop sequence, where the tag is "s<seed>" when a seed is given and "c<i>" when several candidates
are asked for (so " w0 w1" for a plain request). Token logprobs rank the candidates: with
r = (seed or 0) + i, every token of a candidate scores -0.5 * ((r + 1) % 3 + 1) - 0.01 * k, so
candidate 2 is best, then 0 and 3, then 1. The model name selects the rest:
  fail-<status>   that HTTP status with Google's error body
  bad-key         400 INVALID_ARGUMENT, reason API_KEY_INVALID (quoting the key)
  safety          finishReason SAFETY after one token
  blocked         promptFeedback.blockReason SAFETY and no candidates
  thinking        a thought part first, and thoughtsTokenCount 5
  cached          cachedContentTokenCount 4
  cut-stream      streams the first token, then closes without a finishReason
  extra-candidates  one candidate more than candidateCount (streamed: from the second event on)
  index-beyond    a candidate whose index is candidateCount (streamed: from the second event on)

Chat requests bring the rest of the shape, checked too: `systemInstruction`, parts of text,
inlineData, functionCall (model turns) and functionResponse (user turns, as many as the model turn
before called, naming those functions), `tools` of functionDeclarations (with `parameters` or
`parametersJsonSchema`), `toolConfig.functionCallingConfig` (mode, allowedFunctionNames with ANY
only, naming declared functions), and `responseJsonSchema` (with `responseMimeType`
application/json, not with `responseSchema`). Given tools, a mode other than NONE and no function
response in the last turn, candidate i calls the allowed function, or the first, with
{"said": <the last user turn's text>} (model `two-tools`: the first two functions) and stops;
with responseMimeType application/json it writes `{"said": <that text>}` in three pieces (model
`bad-json`: not JSON; `off-schema`: `{"other": 1}`). Model `signed` gives its function calls a
thoughtSignature and wants it back with each of them, as Gemini 3 does.
"""

from __future__ import annotations

import json
import re
from typing import Any
from urllib.parse import parse_qs

from tests.support.fakes.asgi import Recorder, end_events, read_request, send_event, send_json, start_events

MAX_CANDIDATES = 8
_PATH = re.compile(r"^/v1beta/models/(?P<model>[^/:]+):(?P<method>generateContent|streamGenerateContent)$")
_REQUEST_KEYS = {"contents", "generationConfig", "safetySettings", "systemInstruction", "tools", "toolConfig",
                 "cachedContent"}  # fmt: skip
_CONFIG_KEYS = {"stopSequences", "responseMimeType", "responseSchema", "responseModalities", "candidateCount",
                "maxOutputTokens", "temperature", "topP", "topK", "seed", "presencePenalty", "frequencyPenalty",
                "responseLogprobs", "logprobs", "enableEnhancedCivicAnswers", "speechConfig", "mediaResolution",
                "thinkingConfig", "responseJsonSchema"}  # fmt: skip
_MODES = {"NONE", "AUTO", "ANY", "VALIDATED"}
SIGNATURE = "c2lnbmVkL3RoaXM+Pw=="  # what model `signed` gives its function calls
_STATUS = {400: "INVALID_ARGUMENT", 403: "PERMISSION_DENIED", 404: "NOT_FOUND", 429: "RESOURCE_EXHAUSTED",
           500: "INTERNAL", 503: "UNAVAILABLE"}  # fmt: skip


class FakeGemini(Recorder):
    async def __call__(self, scope, receive, send) -> None:
        if scope["type"] != "http":
            return
        headers, raw = await read_request(scope, receive)
        self.raw_paths.append(scope["raw_path"])
        match = _PATH.match(scope["path"])
        if match is None or scope["method"] != "POST":
            await _error(send, 404, f"no route {scope['method']} {scope['path']}")
            return
        query = parse_qs(scope["query_string"].decode())
        body = json.loads(raw)
        model, method = match["model"], match["method"]
        self.requests.append({"path": scope["path"], "query": query, "headers": headers, "body": body})
        problems = _problems(headers, query, method, body, signed=model == "signed")
        if problems:
            self.violations.extend(problems)
            await _error(send, 400, "; ".join(problems))
            return
        if model.startswith("fail-"):
            await _error(send, int(model.split("-")[1]), "fake failure")
            return
        if model == "bad-key":
            await send_json(send, 400, {"error": {
                "code": 400,
                "message": f"API key not valid. Please pass a valid API key. ({headers['x-goog-api-key']})",
                "status": "INVALID_ARGUMENT",
                "details": [{"@type": "type.googleapis.com/google.rpc.ErrorInfo", "reason": "API_KEY_INVALID",
                             "domain": "googleapis.com"}],
            }})  # fmt: skip
            return
        config = body.get("generationConfig", {})
        candidates = [_candidate(model, config, i, body) for i in range(config.get("candidateCount", 1))]
        system = body.get("systemInstruction", {}).get("parts", [])
        prompt_words = sum(len(p.get("text", "").split()) for c in [*body["contents"], {"parts": system}]
                           for p in c["parts"])
        if method == "generateContent":
            answer = _response(model, config, candidates, prompt_words, None, calls=function_calls(model, body))
            await send_json(send, 200, _hostile(model, config, answer))
            return
        await start_events(send)
        steps = max((len(tokens) for tokens, _ in candidates), default=0) or 1
        for step in range(steps):
            if model == "cut-stream" and step == 1:
                break
            response = _response(model, config, candidates, prompt_words, step, last=step == steps - 1,
                                 calls=function_calls(model, body))
            await send_event(send, _hostile(model, config, response) if step else response)
        await end_events(send)


def _said(body: dict[str, Any]) -> str:
    last_user = next(c for c in reversed(body["contents"]) if c["role"] == "user")
    return " ".join(p["text"] for p in last_user["parts"] if "text" in p)


def function_calls(model: str, body: dict[str, Any]) -> list[dict[str, Any]]:
    """The functionCall parts a candidate answers with ([] for a text answer)."""
    declared = [d["name"] for tool in body.get("tools", []) for d in tool.get("functionDeclarations", [])]
    calling = body.get("toolConfig", {}).get("functionCallingConfig", {})
    answered = any("functionResponse" in p for p in body["contents"][-1]["parts"])
    if not declared or calling.get("mode") == "NONE" or (answered and calling.get("mode") != "ANY"):
        return []  # (mode ANY forces a call whatever came before)
    names = calling.get("allowedFunctionNames") or declared[: 2 if model == "two-tools" else 1]
    signed = {"thoughtSignature": SIGNATURE} if model == "signed" else {}
    return [{"functionCall": {"name": name, "args": {"said": _said(body)}}, **signed} for name in names]


def _candidate(model: str, config: dict[str, Any], i: int, body: dict[str, Any] | None = None
               ) -> tuple[list[str], str]:
    """Candidate i's tokens and finish reason."""
    if body is not None and function_calls(model, body):
        return [], "STOP"
    if body is not None and config.get("responseMimeType") == "application/json":
        said = json.dumps(_said(body))
        pieces = {"bad-json": ['{"said": ', "oops"], "off-schema": ['{"other"', ": ", "1}"]}
        return pieces.get(model, ['{"said"', f": {said}", "}"]), "STOP"
    tag = (f"s{config['seed']}" if "seed" in config else "") + (f"c{i}" if config.get("candidateCount", 1) > 1 else "")
    tokens: list[str] = []
    for k in range(min(config.get("maxOutputTokens", 64), 256)):
        if model == "safety" and k == 1:
            return tokens, "SAFETY"
        text = "".join(tokens) + f" {tag}w{k}"
        hits = [text.index(s) for s in config.get("stopSequences", []) if s in text]
        if hits:
            kept = text[: min(hits)][len("".join(tokens)) :]
            return [*tokens, kept] if kept else tokens, "STOP"
        tokens.append(f" {tag}w{k}")
    return tokens, "MAX_TOKENS"


def _response(model, config, candidates, prompt_words: int, step: int | None, last: bool = True,
              calls=()) -> dict[str, Any]:
    """The whole answer (step None) or stream event `step`."""
    if model == "blocked":
        return {"promptFeedback": {"blockReason": "SAFETY"},
                "usageMetadata": {"promptTokenCount": prompt_words, "totalTokenCount": prompt_words}}
    out = []
    for i, (tokens, finish) in enumerate(candidates):
        mine = tokens if step is None else tokens[step : step + 1]
        if step is not None and not mine and not last:
            continue
        parts = [{"text": "".join(mine)}]
        if step in (None, 0):
            parts.extend(calls)
        if model == "thinking" and step in (None, 0):
            parts.insert(0, {"text": "let me think", "thought": True})
        candidate: dict[str, Any] = {"content": {"parts": parts, "role": "model"}, "index": i}
        if step is None or last:
            candidate["finishReason"] = finish
        if config.get("responseLogprobs"):
            first = 0 if step is None else step
            candidate["logprobsResult"] = _logprobs(config, i, mine, first)
        out.append(candidate)
    response: dict[str, Any] = {"candidates": out, "modelVersion": model}
    generated = sum(len(tokens) for tokens, _ in candidates) + 5 * len(calls) * len(candidates)
    usage = {"promptTokenCount": prompt_words}
    if step is None or last:
        usage |= {"candidatesTokenCount": generated, "totalTokenCount": prompt_words + generated}
        if model == "thinking":
            usage |= {"thoughtsTokenCount": 5, "totalTokenCount": prompt_words + generated + 5}
        if model == "cached":
            usage |= {"cachedContentTokenCount": 4}
    response["usageMetadata"] = usage
    return response


def _hostile(model: str, config: dict[str, Any], response: dict[str, Any]) -> dict[str, Any]:
    """The response with more candidates than asked for, or one indexed beyond them."""
    count = config.get("candidateCount", 1)
    if model == "extra-candidates":
        response["candidates"].append(response["candidates"][0] | {"index": count})
    elif model == "index-beyond":
        response["candidates"][0]["index"] = count
    return response


def _logprobs(config: dict[str, Any], i: int, tokens: list[str], first: int) -> dict[str, Any]:
    r = config.get("seed", 0) + i
    chosen = [{"token": t, "logProbability": -0.5 * ((r + 1) % 3 + 1) - 0.01 * (first + k)}
              for k, t in enumerate(tokens)]  # fmt: skip
    if "logprobs" not in config:  # (no number of top candidates asked: the chosen ones alone)
        return {"chosenCandidates": chosen}
    top = [{"candidates": [c, *({"token": f" alt{j}", "logProbability": c["logProbability"] - 1 - j}
                                for j in range(config["logprobs"] - 1))][: config["logprobs"]]}
           for c in chosen]  # fmt: skip
    return {"topCandidates": top, "chosenCandidates": chosen}


def _problems(headers: dict[str, str], query: dict[str, list[str]], method: str, body: Any,
              signed: bool = False) -> list[str]:
    """Where a request breaks the Gemini API's documented shape."""
    problems = []
    if not headers.get("x-goog-api-key"):
        problems.append("x-goog-api-key header missing")
    if "key" in query:
        problems.append("the key belongs in the x-goog-api-key header, not the URL")
    if method == "streamGenerateContent" and query.get("alt") != ["sse"]:
        problems.append("streamGenerateContent needs alt=sse for server-sent events")
    if not isinstance(body, dict):
        return [*problems, "body must be an object"]
    if unknown := set(body) - _REQUEST_KEYS:
        problems.extend(f'Invalid JSON payload received. Unknown name "{name}": Cannot find field.'
                        for name in sorted(unknown))  # Google's words
    contents = body.get("contents")
    if not isinstance(contents, list) or not contents:
        problems.append("contents is required")
    else:
        for i, content in enumerate(contents):
            parts = content.get("parts")
            if content.get("role") not in ("user", "model") or not isinstance(parts, list) or not parts:
                problems.append("contents[]: role (user|model) and parts")
            else:
                problems.extend(_part_problems(i, content, contents[i + 1] if i + 1 < len(contents) else None,
                                               signed))
    problems.extend(_chat_problems(body))
    config = body.get("generationConfig", {})
    if unknown := set(config) - _CONFIG_KEYS:
        problems.extend(f'Invalid JSON payload received. Unknown name "{name}" at \'generation_config\': Cannot find '
                        'field.' for name in sorted(unknown))
    stops = config.get("stopSequences", [])
    if not isinstance(stops, list) or len(stops) > 5 or not all(isinstance(s, str) and s for s in stops):
        problems.append("stopSequences: up to 5 non-empty strings")
    count = config.get("candidateCount", 1)
    if not isinstance(count, int) or not 1 <= count <= MAX_CANDIDATES:
        problems.append(f"candidateCount must be from 1 to {MAX_CANDIDATES}")
    if "temperature" in config and not 0 <= config["temperature"] <= 2:
        problems.append("temperature: values can range from [0.0, 2.0]")
    if "topP" in config and not 0 <= config["topP"] <= 1:
        problems.append("topP: from 0 to 1")
    if "seed" in config and not (isinstance(config["seed"], int) and -(2**31) <= config["seed"] < 2**31):
        problems.append("seed: an int32")
    if "logprobs" in config and (config.get("responseLogprobs") is not True or not 0 <= config["logprobs"] <= 20):
        problems.append("logprobs: only valid if responseLogprobs=True, in the range of [0, 20]")
    if not isinstance(config.get("maxOutputTokens", 0), int):
        problems.append("maxOutputTokens: an integer")
    return problems + _safety_problems(body.get("safetySettings", []))


# SafetySetting (the API reference): a HarmCategory and a HarmBlockThreshold, nothing else.
_HARM_CATEGORIES = {"HARM_CATEGORY_HARASSMENT", "HARM_CATEGORY_HATE_SPEECH", "HARM_CATEGORY_SEXUALLY_EXPLICIT",
                    "HARM_CATEGORY_DANGEROUS_CONTENT", "HARM_CATEGORY_CIVIC_INTEGRITY"}
_THRESHOLDS = {"HARM_BLOCK_THRESHOLD_UNSPECIFIED", "BLOCK_LOW_AND_ABOVE", "BLOCK_MEDIUM_AND_ABOVE", "BLOCK_ONLY_HIGH",
               "BLOCK_NONE", "OFF"}


def _safety_problems(settings: Any) -> list[str]:
    if not isinstance(settings, list):
        return ["safetySettings: a list"]
    problems, seen = [], set()
    for i, setting in enumerate(settings):
        if not isinstance(setting, dict) or set(setting) != {"category", "threshold"} \
                or setting["category"] not in _HARM_CATEGORIES or setting["threshold"] not in _THRESHOLDS:
            problems.append(f"safetySettings[{i}]: a known category and threshold")
        elif setting["category"] in seen:
            problems.append(f"safetySettings[{i}]: the category {setting['category']} is set twice")
        else:
            seen.add(setting["category"])
    return problems


def _part_problems(i: int, content: dict[str, Any], after: dict[str, Any] | None, signed: bool) -> list[str]:
    problems, role = [], content["role"]
    calls = [p["functionCall"]["name"] for p in content["parts"] if isinstance(p, dict) and "functionCall" in p]
    for j, part in enumerate(content["parts"]):
        where = f"contents[{i}].parts[{j}]"
        kind = set(part) if isinstance(part, dict) else set()
        if kind == {"text"} and isinstance(part["text"], str):
            continue
        if kind == {"inlineData"} and role == "user":
            data = part["inlineData"]
            if set(data) != {"mimeType", "data"} or not str(data.get("mimeType")).startswith("image/"):
                problems.append(f"{where}: inlineData has mimeType and data")
        elif kind in ({"functionCall"}, {"functionCall", "thoughtSignature"}) and role == "model":
            call = part["functionCall"]
            if signed and part.get("thoughtSignature") != SIGNATURE:
                problems.append(f"{where}: Function call is missing a thought_signature in functionCall parts")
            if not isinstance(call.get("name"), str) or not isinstance(call.get("args", {}), dict) \
                    or set(call) - {"name", "args", "id"}:
                problems.append(f"{where}: a functionCall has a name and object args")
        elif kind == {"functionResponse"} and role == "user":
            response = part["functionResponse"]
            if not isinstance(response.get("name"), str) or not isinstance(response.get("response"), dict) \
                    or set(response) - {"name", "response", "id"}:
                problems.append(f"{where}: a functionResponse has a name and an object response")
        else:
            problems.append(f"{where}: no such part in a {role} turn ({sorted(kind)})")
    if calls:
        answered = sorted(p["functionResponse"]["name"] for p in (after or {}).get("parts", [])
                          if isinstance(p, dict) and "functionResponse" in p)
        if answered != sorted(calls):
            problems.append(f"contents[{i + 1}]: the number of function response parts must equal the number of "
                            "function call parts of the function call turn")
    return problems


def _chat_problems(body: dict[str, Any]) -> list[str]:
    problems = []
    system = body.get("systemInstruction")
    if system is not None and (set(system) - {"parts", "role"} or not isinstance(system.get("parts"), list)
                               or not all(set(p) == {"text"} for p in system["parts"])):
        problems.append("systemInstruction: text parts")
    declared = []
    for tool in body.get("tools", []):
        if set(tool) != {"functionDeclarations"}:
            problems.append("tools[]: functionDeclarations only")
            continue
        for declaration in tool["functionDeclarations"]:
            if not re.match(r"^[A-Za-z_][A-Za-z0-9_.-]{0,63}$", str(declaration.get("name"))) or \
                    set(declaration) - {"name", "description", "parameters", "parametersJsonSchema"} or \
                    {"parameters", "parametersJsonSchema"} <= set(declaration):
                problems.append("functionDeclarations[]: a name, a description, parameters or parametersJsonSchema")
            declared.append(declaration.get("name"))
    calling = body.get("toolConfig", {}).get("functionCallingConfig")
    if calling is not None:
        if calling.get("mode") not in _MODES or set(calling) - {"mode", "allowedFunctionNames"}:
            problems.append("functionCallingConfig: mode NONE, AUTO, ANY or VALIDATED")
        allowed = calling.get("allowedFunctionNames")
        if allowed is not None and (calling.get("mode") != "ANY" or not set(allowed) <= set(declared)):
            problems.append("allowedFunctionNames: with mode ANY, naming declared functions")
    config = body.get("generationConfig", {})
    thinking = config.get("thinkingConfig", {})
    if set(thinking) - {"thinkingBudget", "thinkingLevel", "includeThoughts"} or \
            {"thinkingBudget", "thinkingLevel"} <= set(thinking) or \
            not isinstance(thinking.get("thinkingBudget", 0), int) or thinking.get("thinkingBudget", 0) < -1:
        problems.append("thinkingConfig: thinkingBudget (an integer from -1) or thinkingLevel, not both")
    if "responseJsonSchema" in config and (config.get("responseMimeType") != "application/json"
                                          or "responseSchema" in config):
        problems.append("responseJsonSchema: needs responseMimeType application/json, and no responseSchema")
    return problems


async def _error(send, status: int, message: str) -> None:
    error = {"code": status, "message": message, "status": _STATUS.get(status, "UNKNOWN")}
    await send_json(send, status, {"error": error})
