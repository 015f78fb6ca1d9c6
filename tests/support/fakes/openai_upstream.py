"""A fake OpenAI-compatible `/v1/completions` server that records what it receives (and, as
OpenAI's, `/v1/chat/completions` and `/v1/responses`: openai_chat_upstream.py,
openai_responses_upstream.py).

Deterministic text: choice i of a prompt is the words " w0 w1 ..." up to max_tokens, cut at the
first stop sequence; a token is one word. The model name selects faults, so one server serves
every test:
  fail-<status>    answers that HTTP status with an OpenAI error body (429 adds Retry-After: 30);
                   the message quotes the Authorization header, as some vendors do
  garbage          answers 200 with a body that is not JSON
  cut-stream       streams two chunks, then closes without [DONE]
  bad-sse          streams a chunk whose data is not JSON
  no-usage         never reports usage
  slow-<ms>        waits before each token (streams) or before answering
  stall            sends the stream's headers, then nothing
  stall-later      streams two chunks, then nothing
  limited-<n>[-<s>]  answers 429 with Retry-After: <s> (default 1) to the first n requests with the
                   same prompt
  flaky-<n>        answers 503 to the first n requests with the same prompt, then succeeds
  reset            streams two chunks, then breaks the connection (no clean end of the body)
  truncated        answers 200 with half of a JSON completion, then breaks the connection
  held             streams one chunk, then waits for `release_held()` (or the client to leave)
  ignores-<a>[-<b>]  answers as if the request lacked the parameters named (n, echo, logprobs, prompt:
                   only the first prompt of a list), as servers that ignore them do
  one-task-usage   reports the usage of the first prompt and choice only, as llama.cpp's server does

`FakeOpenAI(server=...)` is one of the OpenAI-compatible servers the gateway knows (openai, the
default, llama.cpp, vllm, sglang, ollama, unidentified: tests/support/fakes/server_profiles.py): it
says so in its answer to GET /v1/models, as the real one does, and answers a request holding a field
that server does not take with a 400 in the server's own error shape (the real servers other than
OpenAI's would ignore it); llama.cpp's and an unidentified one count the usage of one task only.

Every stream is logged in `streams` (what was meant to be sent, what was, and whether the client
left first), so a test can check that the gateway hung up on the vendor without timing it.
"""

from __future__ import annotations

import asyncio
import json
import re
import time
from dataclasses import dataclass
from typing import Any

from tests.support.fakes import openai_chat_upstream as chat_upstream
from tests.support.fakes import openai_responses_upstream as responses_upstream
from tests.support.fakes.asgi import read_request, send_json
from tests.support.fakes.server_profiles import PROFILES, Profile


@dataclass
class StreamLog:
    """One stream the fake served."""

    model: str
    events: int  # how many data events it meant to send
    sent: int = 0
    client_left: bool = False  # the gateway closed the connection before the fake was done
    ended: bool = False  # the fake's handler has returned


class FakeOpenAI:
    def __init__(self, server: str = "openai") -> None:
        self.profile: Profile = PROFILES[server]
        self.requests: list[dict[str, Any]] = []  # {"path", "headers", "body"}
        self.streams: list[StreamLog] = []
        self.open_streams = 0
        self.holding = 0  # `held` streams waiting for release_held()
        self.failures: dict[str, int] = {}  # flaky-<n>: failures served per prompt
        self._loop: asyncio.AbstractEventLoop | None = None
        self._release: asyncio.Event | None = None

    def clear(self) -> None:
        self.requests.clear()
        self.streams.clear()

    def release_held(self) -> None:
        """Let every `held` stream go on. Called from the test's thread; the fake runs in its own."""
        if self._loop is not None:
            self._loop.call_soon_threadsafe(self._release_now)

    def _release_now(self) -> None:
        if self._release is not None:
            self._release.set()
        self._release = None  # later holds wait for the next release

    # -- ASGI ---------------------------------------------------------------------------------
    async def __call__(self, scope, receive, send) -> None:
        if scope["type"] != "http":
            return
        self._loop = asyncio.get_running_loop()
        headers, body = await read_request(scope, receive)
        if scope["path"] == "/v1/models" and scope["method"] == "GET":
            await send_json(send, 200, {"object": "list", "data": [
                {"id": "m", "object": "model", "created": 0, "owned_by": self.profile.owned_by}]})
            return
        if scope["path"] == "/v1/chat/completions" and scope["method"] == "POST":
            await self._chat(send, scope, headers, json.loads(body), receive)
            return
        if scope["path"] == "/v1/responses" and scope["method"] == "POST" and self.profile.name == "openai":
            await self._responses(send, scope, headers, json.loads(body), receive)
            return
        if scope["path"] != "/v1/completions" or scope["method"] != "POST":
            await send_json(send, 404, {"error": {"message": "not found", "type": "invalid_request_error"}})
            return
        request = json.loads(body)
        self.requests.append({"path": scope["path"], "headers": headers, "body": request})
        if refusal := self._refusal("completions", request):
            await send_json(send, *refusal)
            return
        model = request.get("model", "")
        if model.startswith("ignores-"):
            request = ignoring(request, model.split("-")[1:])
        if model.startswith("fail-"):
            status = int(model.split("-")[1])
            extra = [(b"retry-after", b"30")] if status == 429 else []
            message = f"fake failure {status}; credentials used: {headers.get('authorization')}"
            await send_json(send, status, {"error": {"message": message, "type": "server_error"}}, extra)
            return
        if model.startswith(("flaky-", "limited-")):
            key = model + json.dumps(request.get("prompt"))
            _, times, *wait = model.split("-")
            if self.failures.get(key, 0) < int(times):
                self.failures[key] = self.failures.get(key, 0) + 1
                if model.startswith("flaky-"):
                    await send_json(send, 503, {"error": {"message": "flaky vendor", "type": "server_error"}})
                else:
                    await send_json(send, 429, {"error": {"message": "slow down", "type": "rate_limit"}},
                                    [(b"retry-after", (wait[0] if wait else "1").encode())])
                return
        if model == "truncated":
            body = json.dumps(completion(request)).encode()
            await send({"type": "http.response.start", "status": 200,
                        "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]})
            await send({"type": "http.response.body", "body": body[: len(body) // 2], "more_body": True})
            raise ConnectionAbortedError("fake vendor breaks the connection")
        if model == "garbage":
            await _raw(send, 200, b"{not json", b"application/json")
            return
        delay = int(model.split("-")[1]) / 1000 if model.startswith("slow-") else 0.0
        if request.get("stream"):
            await self._stream(send, request, model, delay, receive)
        else:
            if delay and await _client_leaves_within(receive, delay):
                return  # like a real vendor, stop working for a client that is gone
            await send_json(send, 200, completion(request, with_usage=model != "no-usage",
                                                  one_task=self.profile.one_task_usage))

    def _refusal(self, endpoint: str, request: dict[str, Any]) -> tuple[int, dict[str, Any]] | None:
        """The server's refusal of a request holding what it does not take (None: none)."""
        if unknown := self.profile.unknown(endpoint, request):
            return self.profile.refuse(unknown)
        if self.profile.string_prompt and not isinstance(request.get("prompt", ""), str):
            return self.profile.refusal("prompt must be a string")
        return None

    async def _chat(self, send, scope, headers, request, receive) -> None:
        self.requests.append({"path": scope["path"], "headers": headers, "body": request})
        problem = chat_upstream.wire_problem(request)
        refusal = self._refusal("chat", request)
        if problem is not None:
            await send_json(send, 400, {"error": {"message": problem, "type": "invalid_request_error"}})
        elif refusal is not None:
            await send_json(send, *refusal)
        elif request["model"].startswith("fail-"):  # as on /v1/completions (a fallback's first model)
            status = int(request["model"].split("-")[1])
            await send_json(send, status, {"error": {"message": f"fake failure {status}", "type": "server_error"}})
        elif request.get("stream") and request["model"] == "stall-later":  # two chunks, then nothing
            await send({"type": "http.response.start", "status": 200,
                        "headers": [(b"content-type", b"text/event-stream")]})
            for event in chat_upstream.chat_events(request, one_task_usage=self.profile.one_task_usage)[:2]:
                await send({"type": "http.response.body", "body": b"data: " + json.dumps(event).encode() + b"\n\n",
                            "more_body": True})
            while (await receive())["type"] != "http.disconnect":
                pass
        elif request.get("stream"):
            events = chat_upstream.chat_events(request, one_task_usage=self.profile.one_task_usage)
            data = b"".join(b"data: " + json.dumps(e).encode() + b"\n\n" for e in events)
            await _raw(send, 200, data + b"data: [DONE]\n\n", b"text/event-stream")
        else:
            await send_json(send, 200, chat_upstream.chat(request, one_task_usage=self.profile.one_task_usage))

    async def _responses(self, send, scope, headers, request, receive) -> None:
        """OpenAI's Responses API (tests/support/fakes/openai_responses_upstream.py); only the
        `openai` server has it."""
        self.requests.append({"path": scope["path"], "headers": headers, "body": request})
        if refusal := responses_upstream.wire_problem(request):
            await send_json(send, *refusal)
        elif request["model"].startswith("fail-"):  # as on /v1/completions (a fallback's first model)
            status = int(request["model"].split("-")[1])
            await send_json(send, status, {"error": {"message": f"fake failure {status}", "type": "server_error"}})
        elif request.get("stream") and request["model"] == "error-event":  # begun, then OpenAI's `error` event
            begun = responses_upstream.events(request)[:3]
            failed = {"type": "error", "sequence_number": 3, "code": "server_error", "param": None,
                      "message": f"the model broke; credentials used: {headers.get('authorization')}"}
            await _raw(send, 200, responses_upstream.sse([*begun, failed]), b"text/event-stream")
        elif request.get("stream") and request["model"] == "stall-later":  # begun, then nothing
            await send({"type": "http.response.start", "status": 200,
                        "headers": [(b"content-type", b"text/event-stream")]})
            for event in responses_upstream.events(request)[:5]:  # begun, an item, a part, one delta
                await send({"type": "http.response.body", "body": responses_upstream.sse([event]), "more_body": True})
            while (await receive())["type"] != "http.disconnect":
                pass
        elif request.get("stream"):
            await _raw(send, 200, responses_upstream.sse(responses_upstream.events(request)), b"text/event-stream")
        else:
            await send_json(send, 200, responses_upstream.respond(request))

    async def _stream(self, send, request, model, delay, receive) -> None:
        await send({"type": "http.response.start", "status": 200,
                    "headers": [(b"content-type", b"text/event-stream")]})
        self.open_streams += 1
        gone = asyncio.Event()  # like a real vendor, stop generating when the client leaves

        async def watch() -> None:
            while (await receive())["type"] != "http.disconnect":
                pass
            gone.set()

        watcher = asyncio.create_task(watch())
        if model in ("stall", "stall-later"):
            events = [] if model == "stall" else list(stream_events(request))[:2]
        else:
            events = list(stream_events(request, with_usage=model != "no-usage", one_task=self.profile.one_task_usage))
        if model in ("cut-stream", "reset"):
            events = events[:2]
        if model == "bad-sse":
            events = events[:1] + ["{broken"]
        log = StreamLog(model, len(events))
        self.streams.append(log)
        try:
            for i, data in enumerate(events):
                if delay:
                    await asyncio.sleep(delay)
                if model == "held" and i == 1:
                    await self._hold(gone)
                if gone.is_set():
                    log.client_left = True
                    return
                await send({"type": "http.response.body", "body": f"data: {data}\n\n".encode(), "more_body": True})
                log.sent += 1
            if model in ("stall", "stall-later"):
                await gone.wait()
                log.client_left = True
                return
            if model == "reset":
                raise ConnectionAbortedError("fake vendor breaks the connection")
            if model not in ("cut-stream", "bad-sse"):
                await send({"type": "http.response.body", "body": b"data: [DONE]\n\n", "more_body": True})
            await send({"type": "http.response.body", "body": b"", "more_body": False})
        finally:
            watcher.cancel()
            self.open_streams -= 1
            log.ended = True

    async def _hold(self, gone: asyncio.Event) -> None:
        """Wait for release_held() or for the client to leave."""
        if self._release is None:
            self._release = asyncio.Event()
        waits = [asyncio.create_task(self._release.wait()), asyncio.create_task(gone.wait())]
        self.holding += 1
        try:
            await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
        finally:
            self.holding -= 1
            for wait in waits:
                wait.cancel()


# -- the deterministic "model" -----------------------------------------------------------------
def prompts_of(request: dict[str, Any]) -> list[str]:
    prompt = request["prompt"]
    return [prompt] if isinstance(prompt, str) else list(prompt)


MAX_GENERATED = 256  # a fuzzer asks for max_tokens up to 2**63; the fake stops at this many


def words(request: dict[str, Any]) -> tuple[list[str], str]:
    """The generated tokens of any choice, and the finish reason."""
    max_tokens = min(request.get("max_tokens", 16), MAX_GENERATED)
    stop = request.get("stop") or []
    stop = [stop] if isinstance(stop, str) else stop
    tokens: list[str] = []
    for k in range(max_tokens):
        token = f" w{k}"
        text = "".join(tokens) + token
        for s in stop:
            if s in text:
                cut = text[: text.index(s)]
                kept = cut[len("".join(tokens)) :]
                if kept:
                    tokens.append(kept)
                return tokens, "stop"
        tokens.append(token)
    return tokens, "length"


def logprobs_for(tokens: list[str], k: int, offset: int = 0) -> dict[str, Any]:
    token_logprobs = [-0.5 - 0.01 * i for i in range(len(tokens))]
    offsets, at = [], offset
    for t in tokens:
        offsets.append(at)
        at += len(t)
    return {
        "tokens": tokens,
        "token_logprobs": token_logprobs,
        # As OpenAI: the sampled token is always there (alone for logprobs 0), then k - 1 more.
        "top_logprobs": [{t: lp, **{f" alt{j}": lp - 1 - j for j in range(k - 1)}}
                         for t, lp in zip(tokens, token_logprobs)],
        "text_offset": offsets,
    }


def prompt_logprobs(prompt: str, k: int) -> dict[str, Any]:
    """An echoed prompt's logprobs as OpenAI streams them in the echo's chunk: a token per word (with
    the whitespace before it), the first one unscored (`null`, as it has nothing before it)."""
    scored = logprobs_for(re.findall(r"\s*\S+|\s+", prompt), k)
    scored["token_logprobs"][0] = scored["top_logprobs"][0] = None
    return scored


def ignoring(request: dict[str, Any], parameters: list[str]) -> dict[str, Any]:
    """The request as a server that ignores `parameters` reads it."""
    read = {name: value for name, value in request.items() if name not in parameters}
    if "prompt" in parameters:
        read["prompt"] = prompts_of(request)[0]
    return read


def prompt_tokens(prompt: str) -> int:
    return max(1, len(prompt.split()))


def completion(request: dict[str, Any], with_usage: bool = True, one_task: bool = False) -> dict[str, Any]:
    n = request.get("n", 1)
    tokens, finish = words(request)
    choices = []
    for p, prompt in enumerate(prompts_of(request)):
        for i in range(n):
            text = "".join(tokens)
            choice: dict[str, Any] = {"index": p * n + i, "text": (prompt + text) if request.get("echo") else text,
                                      "finish_reason": finish, "logprobs": None}
            if request.get("logprobs") is not None:
                choice["logprobs"] = logprobs_for(tokens, request["logprobs"], len(prompt) if request.get("echo") else 0)
            choices.append(choice)
    body: dict[str, Any] = {"id": "cmpl-upstream", "object": "text_completion", "created": int(time.time()),
                            "model": request["model"], "system_fingerprint": "fp_fake", "choices": choices}
    if with_usage:
        body["usage"] = usage(request, len(tokens))
    if with_usage and (one_task or request["model"] == "one-task-usage"):
        body["usage"] = usage({"prompt": prompts_of(request)[0]}, len(tokens))
    return body


def usage(request: dict[str, Any], generated: int) -> dict[str, Any]:
    prompts = prompts_of(request)
    n = request.get("n", 1)
    # model "per-character": a vendor whose tokenizer bills a token per character (CJK text, say)
    prompt = sum(len(p) if request.get("model") == "per-character" else prompt_tokens(p) for p in prompts)
    completion_tokens = generated * n * len(prompts)
    return {"prompt_tokens": prompt, "completion_tokens": completion_tokens,
            "total_tokens": prompt + completion_tokens, "prompt_tokens_details": {"cached_tokens": 0}}


def stream_events(request: dict[str, Any], with_usage: bool = True, one_task: bool = False):
    n = request.get("n", 1)
    tokens, finish = words(request)
    prompts = prompts_of(request)
    include_usage = bool((request.get("stream_options") or {}).get("include_usage")) and with_usage
    head = {"id": "cmpl-upstream", "object": "text_completion", "created": int(time.time()), "model": request["model"]}

    def chunk(choices, **extra):
        body = head | {"choices": choices} | extra
        if include_usage and "usage" not in extra:
            body["usage"] = None
        return json.dumps(body)

    for p, prompt in enumerate(prompts):
        for i in range(n):
            index = p * n + i
            if request.get("echo"):
                scored = prompt and request.get("logprobs") is not None
                lp = prompt_logprobs(prompt, request["logprobs"]) if scored else None
                yield chunk([{"index": index, "text": prompt, "finish_reason": None, "logprobs": lp}])
            offset = len(prompt) if request.get("echo") else 0
            for t in tokens:
                lp = logprobs_for([t], request["logprobs"], offset) if request.get("logprobs") is not None else None
                offset += len(t)
                yield chunk([{"index": index, "text": t, "finish_reason": None, "logprobs": lp}])
            yield chunk([{"index": index, "text": "", "finish_reason": finish, "logprobs": None}])
    if include_usage:
        yield chunk([], usage=usage({"prompt": prompts[0]} if one_task else request, len(tokens)))


async def _client_leaves_within(receive, seconds: float) -> bool:
    async def disconnect() -> None:
        while (await receive())["type"] != "http.disconnect":
            pass

    try:
        await asyncio.wait_for(disconnect(), seconds)
    except TimeoutError:
        return False
    return True


async def _raw(send, status: int, body: bytes, content_type: bytes, extra_headers=()) -> None:
    await send({"type": "http.response.start", "status": status,
                "headers": [(b"content-type", content_type), (b"content-length", str(len(body)).encode()),
                            *extra_headers]})
    await send({"type": "http.response.body", "body": body})


if __name__ == "__main__":  # a standalone fake, for `make fuzz` and manual tries
    import argparse

    import uvicorn

    parser = argparse.ArgumentParser()
    parser.add_argument("--port", type=int, default=9100)
    args = parser.parse_args()
    uvicorn.run(FakeOpenAI(), host="127.0.0.1", port=args.port, log_level="warning", http="httptools")
