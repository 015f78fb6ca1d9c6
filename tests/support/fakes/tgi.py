"""A fake Text Generation Inference server (Hugging Face TGI): `POST /generate` and
`POST /generate_stream`, checked against TGI's documented request shape and recorded.

Shapes follow TGI's router (`GenerateRequest` {inputs, parameters}; `GenerateParameters`;
`GenerateResponse` {generated_text, details?}; a stream's `StreamResponse` events {index, token,
top_tokens?, generated_text, details}, the last carrying `generated_text` and, when
`parameters.details` is true, `details` {finish_reason, generated_tokens, seed, input_length};
errors {error, error_type}). Events are written as TGI's server writes them, `data:{...}` without a
space, and the stream simply ends after the last one (no [DONE]).

The real router ignores members it does not know; this fake refuses them (422, error_type
`validation`), so a gateway that adds anything to the client's `args` fails here. It also answers
TGI's own validation errors in TGI's words (temperature, top_p, top_k, max_new_tokens, stop).

The "model" writes " w0", " w1", ... up to `max_new_tokens` (TGI's default 100), cut at the first
stop sequence; the prompt's tokens are its words. With `token`, every request must carry
`authorization: Bearer <token>` (as an Inference Endpoint does); 401 otherwise. `inputs` selects
faults:
  fail-<status>   that status with TGI's error body, quoting the authorization header
  stream-error    streams one token, then an `{"error", "error_type": "generation"}` event
  cut-stream      streams one token, then closes without the last event
  garbage         a 200 whose body is not JSON
  huge-count      reports 10**12 generated tokens
"""

from __future__ import annotations

import json
from typing import Any

from tests.support.fakes.asgi import Recorder, end_events, read_request, send_json, start_events

PARAMETERS = {"best_of", "temperature", "repetition_penalty", "frequency_penalty", "top_k", "top_p", "typical_p",
              "do_sample", "max_new_tokens", "return_full_text", "stop", "truncate", "watermark", "details",
              "decoder_input_details", "seed", "top_n_tokens", "grammar", "adapter_id"}  # fmt: skip
DEFAULT_MAX_NEW_TOKENS = 100
MAX_STOP_SEQUENCES = 4
MAX_TOTAL_TOKENS = 2048
_ERROR_TYPES = {401: "authentication", 422: "validation", 424: "generation", 429: "overloaded",
                500: "incomplete_generation"}  # fmt: skip


class FakeTGI(Recorder):
    def __init__(self, token: str | None = None) -> None:
        super().__init__()
        self.token = token

    async def __call__(self, scope, receive, send) -> None:
        if scope["type"] != "http":
            return
        headers, raw = await read_request(scope, receive)
        self.raw_paths.append(scope.get("raw_path", b""))
        if scope["method"] != "POST" or scope["path"] not in ("/generate", "/generate_stream"):
            await _error(send, 404, f"no route {scope['method']} {scope['path']}", "not_found")
            return
        try:
            body = json.loads(raw)
        except ValueError:
            body = None
        self.requests.append({"path": scope["path"], "query": scope["query_string"].decode(), "headers": headers,
                              "body": body})
        if self.token is not None and headers.get("authorization") != f"Bearer {self.token}":
            await _error(send, 401, "Unauthorized", "authentication")
            return
        if problem := _problem(headers, body):
            self.violations.append(problem)
            await _error(send, 422, problem, "validation")
            return
        inputs, parameters = body["inputs"], body.get("parameters") or {}
        if inputs.startswith("fail-"):
            status = int(inputs.split()[0].split("-")[1])
            await _error(send, status, f"fake failure; authorization: {headers.get('authorization')}",
                         _ERROR_TYPES.get(status, "generation"))
            return
        words, finish = generate(inputs, parameters)
        prompt_tokens = len(inputs.split())
        generated = 10**12 if inputs.startswith("huge-count") else len(words)
        if scope["path"] == "/generate":
            if inputs.startswith("garbage"):
                await send({"type": "http.response.start", "status": 200,
                            "headers": [(b"content-type", b"application/json")]})
                await send({"type": "http.response.body", "body": b"<html>not json"})
                return
            answer: dict[str, Any] = {"generated_text": _full(inputs, words, parameters)}
            if parameters.get("details"):
                answer["details"] = {
                    "finish_reason": finish, "generated_tokens": generated, "seed": parameters.get("seed"),
                    "prefill": [{"id": i, "text": w, "logprob": None if i == 0 else -1.0}
                                for i, w in enumerate(inputs.split())] if parameters.get("decoder_input_details")
                    else [],
                    "tokens": [_token(i, w) for i, w in enumerate(words)],
                }  # fmt: skip
            await send_json(send, 200, answer)
            return
        await start_events(send)
        for i, word in enumerate(words):
            last = i == len(words) - 1
            event: dict[str, Any] = {"index": i + 1, "token": _token(i, word), "generated_text": None, "details": None}
            if last:
                event["generated_text"] = _full(inputs, words, parameters)
                if parameters.get("details"):
                    event["details"] = {"finish_reason": finish, "generated_tokens": generated,
                                        "seed": parameters.get("seed"), "input_length": prompt_tokens}
            await _data(send, event)
            if i == 0 and inputs.startswith("stream-error"):
                await _data(send, {"error": "Request failed during generation: out of memory",
                                   "error_type": "generation"})
                break
            if i == 0 and inputs.startswith("cut-stream"):
                break
        await end_events(send)


def generate(inputs: str, parameters: dict[str, Any]) -> tuple[list[str], str]:
    """The generated words and TGI's finish reason (length, stop_sequence)."""
    limit = parameters.get("max_new_tokens")
    limit = DEFAULT_MAX_NEW_TOKENS if limit is None else limit
    words: list[str] = []
    for k in range(min(limit, 256)):
        words.append(f" w{k}")
        if any(stop in "".join(words) for stop in parameters.get("stop") or []):
            return words, "stop_sequence"
    return words, "length"


def _full(inputs: str, words: list[str], parameters: dict[str, Any]) -> str:
    return (inputs if parameters.get("return_full_text") else "") + "".join(words)


def _token(i: int, word: str) -> dict[str, Any]:
    return {"id": 1000 + i, "text": word, "logprob": -0.5, "special": False}


def _problem(headers: dict[str, str], body: Any) -> str | None:
    """Where a request breaks TGI's GenerateRequest, in the router's words where it has some."""
    if not headers.get("content-type", "").startswith("application/json"):
        return "Expected request with `Content-Type: application/json`"
    if not isinstance(body, dict):
        return "Failed to deserialize the JSON body into the target type: expected struct GenerateRequest"
    if unknown := sorted(set(body) - {"inputs", "parameters"}):
        return f"Failed to deserialize the JSON body into the target type: unknown field `{unknown[0]}`"
    if not isinstance(body.get("inputs"), str):
        return "Failed to deserialize the JSON body into the target type: missing field `inputs`"
    if not body["inputs"]:
        return "`inputs` cannot be empty"
    parameters = body.get("parameters")
    if parameters is None:
        return None
    if not isinstance(parameters, dict):
        return "Failed to deserialize the JSON body into the target type: parameters: expected struct"
    if unknown := sorted(set(parameters) - PARAMETERS):
        return f"Failed to deserialize the JSON body into the target type: parameters: unknown field `{unknown[0]}`"
    return _parameter_problem(parameters, len(body["inputs"].split()))


def _parameter_problem(parameters: dict[str, Any], input_length: int) -> str | None:
    numbers = {"temperature", "repetition_penalty", "frequency_penalty", "top_p", "typical_p"}
    for name in numbers & set(parameters):
        value = parameters[name]
        if value is not None and (not isinstance(value, int | float) or isinstance(value, bool)):
            return f"Failed to deserialize the JSON body into the target type: parameters.{name}: invalid type"
    for name in {"top_k", "max_new_tokens", "seed", "top_n_tokens", "best_of", "truncate"} & set(parameters):
        value = parameters[name]
        if value is not None and (type(value) is not int or value < 0):
            return f"Failed to deserialize the JSON body into the target type: parameters.{name}: invalid value"
    if (t := parameters.get("temperature")) is not None and t <= 0:
        return "`temperature` must be strictly positive"
    if (p := parameters.get("top_p")) is not None and not 0 < p < 1:
        return "`top_p` must be > 0.0 and < 1.0"
    if (k := parameters.get("top_k")) is not None and k <= 0:
        return "`top_k` must be strictly positive"
    new = parameters.get("max_new_tokens")
    if new is not None and new <= 0:
        return "`max_new_tokens` must be strictly positive"
    if new is not None and input_length + new > MAX_TOTAL_TOKENS:
        return (f"`inputs` tokens + `max_new_tokens` must be <= {MAX_TOTAL_TOKENS}. Given: {input_length} "
                f"`inputs` tokens and {new} `max_new_tokens`")
    stop = parameters.get("stop")
    if stop is not None:
        if not isinstance(stop, list) or not all(isinstance(s, str) for s in stop):
            return "Failed to deserialize the JSON body into the target type: parameters.stop: invalid type"
        if len(stop) > MAX_STOP_SEQUENCES:
            return f"`stop` supports up to {MAX_STOP_SEQUENCES} stop sequences. Given: {len(stop)}"
    for name in ("do_sample", "return_full_text", "watermark", "details", "decoder_input_details"):
        if parameters.get(name) is not None and not isinstance(parameters[name], bool):
            return f"Failed to deserialize the JSON body into the target type: parameters.{name}: invalid type"
    return None


async def _data(send, payload: Any) -> None:
    await send({"type": "http.response.body", "body": f"data:{json.dumps(payload)}\n\n".encode(), "more_body": True})


async def _error(send, status: int, message: str, error_type: str) -> None:
    await send_json(send, status, {"error": message, "error_type": error_type})
