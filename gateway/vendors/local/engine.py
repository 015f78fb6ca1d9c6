"""llama.cpp's server engine, in-process through xllamacpp: load a GGUF, generate, score prompts.

The engine's calls block (they release the GIL), so they run on a thread pool with one thread per
engine slot, each holding a slot of `_slots` for exactly as long as the engine works for it:
requests beyond the slots wait here, where a client that leaves simply stops waiting, instead of
in the engine's queue, which cannot be cancelled. Streamed chunks cross to the event loop with
`call_soon_threadsafe`; a consumer that stops reading makes the engine's callback answer "stop",
which ends the generation and frees the slot at the next token.

`xllamacpp.Server` always starts llama.cpp's HTTP server too (on a loopback port; it cannot be
turned off). It is given a random API key, so only this adapter can use it, for the one thing
the in-process API lacks: tokenization.
"""

from __future__ import annotations

import asyncio
import secrets
import threading
from collections.abc import AsyncIterator, Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypeVar

from gateway.core.completion import COUNT_TOKENS_TIMEOUT
from gateway.core.errors import clip
from gateway.vendors import untrusted as read
from gateway.vendors.logprobs import TokenLogprob, engine_entries, from_engine, raw_token

if TYPE_CHECKING:
    import httpx
    import xllamacpp

T = TypeVar("T")

WARM_UP = "Hello"  # the prompt of the generation that warms the engine as it loads
FORCE = 100  # a logit bias that makes the engine sample the biased token (and report it unbiased)
LOOKUP_SIZES = (256, None)  # top-k sizes tried when looking a token up; None: the whole vocabulary


# llama.cpp's seeds are uint32 and 2**32 - 1 means "pick a random seed": the contract's int64 seed
# is taken modulo 2**32 - 1, so every seed is a fixed engine seed.
SEED_MODULUS = 2**32 - 1


def engine_seed(seed: int) -> int:
    return seed % SEED_MODULUS


@dataclass(frozen=True, slots=True)
class EngineOptions:
    model_path: str
    alias: str  # the model name the engine reports
    parallel: int  # slots: requests decoded together
    context_size: int  # tokens per slot (prompt + completion)
    threads: int | None  # None: the engine's default (all cores)
    quiet: bool  # silence llama.cpp's own logging (it writes to stderr)


def engine_params(o: EngineOptions) -> xllamacpp.CommonParams:
    """llama.cpp's settings for `o` (tests and the benchmark build the same engine with them)."""
    import xllamacpp  # the engine's binding: imported by whoever runs a model, not by the registry

    params = xllamacpp.CommonParams()
    params.model.path = o.model_path
    params.model_alias = {o.alias}
    params.n_parallel = o.parallel
    params.n_ctx = o.context_size * o.parallel  # the engine splits it evenly across slots
    if o.threads:
        params.cpuparams.n_threads = o.threads
        params.cpuparams_batch.n_threads = o.threads
    if o.quiet:
        params.verbosity = 0
    params.offline = True  # never download anything
    params.cache_ram_mib = 0  # no host-RAM prompt cache (8 GiB by default); each slot keeps its own
    params.endpoint_slots = False
    params.hostnames = ["127.0.0.1"]  # its HTTP server, which cannot be turned off
    params.port = 0
    return params


class EngineError(Exception):
    """An error the engine returned (e.g. a prompt longer than the context), or an answer of the
    engine that is not what llama.cpp documents. Its fields are read as defensively as a vendor's."""

    def __init__(self, error: Any) -> None:
        error = error if isinstance(error, dict) else {"message": error}
        message, code, kind = error.get("message"), error.get("code"), error.get("type")
        self.message = clip(message, read.MESSAGE_LIMIT) if isinstance(message, str) else "engine error"
        super().__init__(self.message)
        self.status = code if isinstance(code, int) and not isinstance(code, bool) and 400 <= code <= 599 else 500
        self.kind = kind[:64] if isinstance(kind, str) else ""


class Engine:
    def __init__(self, options: EngineOptions) -> None:
        self.options = options
        self.vocab_size = 0
        # The model's start-of-text (BOS) token, which an empty prompt generates from, as OpenAI's
        # models do from <|endoftext|>; None when the model declares none.
        self.start_token: int | None = None
        self._server: Any = None
        self._http: httpx.AsyncClient | None = None
        self._counting: httpx.Client | None = None  # count_tokens runs on worker threads
        self._probe = 0  # a token that is a whole character, forced when looking other tokens up
        self._slots = asyncio.Semaphore(options.parallel)
        self._threads = ThreadPoolExecutor(options.parallel, thread_name_prefix="local-engine")

    def load(self) -> None:
        """Load the model and start the engine. Blocks while the model loads: run it on a thread."""
        params = engine_params(self.options)
        key = secrets.token_urlsafe(24)
        params.api_keys = [key]
        import httpx  # here, with the model: a gateway without the local vendor never imports it
        import xllamacpp

        server = xllamacpp.Server(params)
        url = server.listening_address
        headers = {"authorization": f"Bearer {key}"}
        # trust_env=False: the engine is on loopback, and httpx would send its calls to HTTP_PROXY
        # (docs/operations.md#networks) unless NO_PROXY happened to name 127.0.0.1.
        with httpx.Client(base_url=url, headers=headers, timeout=30, trust_env=False) as http:
            meta = http.get("/v1/models").raise_for_status().json()["data"][0]["meta"]
            probe = http.post("/tokenize", json={"content": ","}).raise_for_status().json()["tokens"]
            bos = http.get("/props").raise_for_status().json().get("bos_token")
            start = http.post("/tokenize", json={"content": bos, "parse_special": True}).raise_for_status().json()[
                "tokens"] if isinstance(bos, str) and bos else []
        self.vocab_size = int(meta["n_vocab"])
        self._probe = probe[0]
        self.start_token = start[0] if len(start) == 1 else None
        self._http = httpx.AsyncClient(base_url=url, headers=headers, timeout=30, trust_env=False)
        self._counting = httpx.Client(base_url=url, headers=headers, timeout=COUNT_TOKENS_TIMEOUT, trust_env=False)
        self._server = server
        # One token generated before the engine says it is ready: the first generation pages the
        # weights in and sets up the engine's compute buffers, which otherwise the first client's
        # request waits for (seconds on a cold or busy machine).
        self._call({"prompt": WARM_UP, "max_tokens": 1, "temperature": 0})

    async def close(self) -> None:
        self._threads.shutdown(wait=False, cancel_futures=True)
        if self._http is not None:
            await self._http.aclose()
        if self._counting is not None:
            self._counting.close()
        # The destructor stops the engine; a call still running holds its own reference.
        self._server = None

    def count_tokens(self, text: str) -> int:
        """How many tokens `text` is as generated text (no start token, special-token text as
        plain text). Blocking: for the ledger's worker thread, never the event loop."""
        if self._counting is None:
            raise EngineError("the model is not loaded")
        import httpx  # (loaded by `load`)

        try:
            response = self._counting.post("/tokenize", json={"content": text, "parse_special": False,
                                                              "add_special": False})
            return len(response.raise_for_status().json()["tokens"])
        except (httpx.HTTPError, ValueError, KeyError) as exc:
            raise EngineError(f"tokenization failed: {exc}") from None

    async def tokenize(self, text: str) -> list[tuple[int, bytes]]:
        """`text` as the engine tokenizes a prompt: (token id, token bytes) pairs."""
        assert self._http is not None
        import httpx  # (loaded by `load`)

        try:
            response = await self._http.post("/tokenize", json={"content": text, "with_pieces": True,
                                                                "parse_special": True, "add_special": True})
            response.raise_for_status()
            pieces = response.json()["tokens"]
        except (httpx.HTTPError, ValueError, KeyError) as exc:
            raise EngineError(f"tokenization failed: {exc}") from None
        # A piece that is not valid UTF-8 (part of a character) comes as a list of byte values.
        try:
            return [(_token_id(p), read.token(p["piece"], "a piece").encode() if isinstance(p["piece"], str)
                     else read.token_bytes(p["piece"], "a piece")) for p in read.items(pieces, "tokens")]
        except read.READ_ERRORS as exc:
            raise EngineError(f"tokenization answered unreadably: {read.why(exc)}") from None

    async def generate(self, body: dict[str, Any], chat: bool = False) -> AsyncIterator[dict[str, Any]]:
        """The engine's streamed chunks for one completion request (`body` as for llama.cpp's
        /v1/completions; with `chat`, a chat request as for /v1/chat/completions, which the engine
        renders with the model's chat template). Closing the iterator stops the generation at the
        next token."""
        loop = asyncio.get_running_loop()
        queue: asyncio.Queue[Any] = asyncio.Queue()
        stop = threading.Event()
        server = self._server
        end = object()

        def on_chunk(chunk: dict[str, Any] | None) -> bool:
            # Runs on the engine thread, which swallows exceptions raised here: keep it trivial.
            if chunk is not None:  # None separates the prompts of a list; we send one prompt
                loop.call_soon_threadsafe(queue.put_nowait, chunk)
            return stop.is_set()

        def call() -> None:
            try:
                handle = server.handle_chat_completions if chat else server.handle_completions
                handle({**body, "stream": True}, on_chunk)
            finally:
                loop.call_soon_threadsafe(queue.put_nowait, end)

        future = await self._start(call)
        try:
            while (chunk := await queue.get()) is not end:
                if not isinstance(chunk, dict):
                    raise EngineError("the engine sent a chunk that is not an object")
                if "error" in chunk:
                    raise EngineError(chunk["error"])
                yield chunk
            await asyncio.shield(future)  # an exception of the call itself
        finally:
            stop.set()

    async def score(self, ids: list[int], top: int) -> list[TokenLogprob]:
        """The exact log-probability of each token of a prompt after the ones before it, with the
        `top` likeliest alternatives, for ids[1:] (the first token has nothing to follow)."""
        stop = threading.Event()
        future = await self._start(lambda: self._score(ids, top, stop))
        try:
            return await asyncio.shield(future)
        finally:
            stop.set()

    async def _start(self, work: Callable[[], T]) -> asyncio.Future[T]:
        """Run `work` on an engine thread once a slot is free; the slot is released when the
        work ends, however its caller fares."""
        if self._server is None:
            raise EngineError("the engine is not running")
        await self._slots.acquire()
        try:
            future = asyncio.get_running_loop().run_in_executor(self._threads, work)
        except BaseException:
            self._slots.release()
            raise
        future.add_done_callback(self._release)
        return future

    def _release(self, future: asyncio.Future[Any]) -> None:
        self._slots.release()
        if not future.cancelled():
            future.exception()  # retrieved here when the caller went away before the end

    def _score(self, ids: list[int], top: int, stop: threading.Event) -> list[TokenLogprob]:
        """Blocking. One 1-token request per prompt position, each forcing the prompt's next token
        with a logit bias: llama.cpp reports the forced token's true, unbiased logprob and the
        unbiased alternatives, and its prompt cache makes each step reprocess a single token."""
        scored = []
        for i in range(1, len(ids)):
            if stop.is_set():
                break  # the caller is gone
            prefix, token = ids[:i], ids[i]
            answer = self._call({"prompt": prefix, "max_tokens": 1, "temperature": 0, "logprobs": max(top, 1),
                                 "logit_bias": {str(token): FORCE}})
            try:
                entries = engine_entries(_first_choice(answer))
                if entries and read.obj(entries[0], "an entry").get("id") == token:
                    scored.append(from_engine(entries[0]))
                    continue
            except read.READ_ERRORS as exc:
                raise EngineError(f"malformed engine answer: {read.why(exc)}") from None
            # llama.cpp reports no entry for a token that is only part of a character.
            scored.append(self._look_up(prefix, token, top))
        return scored

    def _look_up(self, prefix: list[int], token: int, top: int) -> TokenLogprob:
        """Blocking. `token`'s logprob after `prefix`, found in the engine's ranked alternatives
        while it is made to sample a whole-character token (which always gets an entry)."""
        for size in LOOKUP_SIZES:
            answer = self._call({"prompt": prefix, "max_tokens": 1, "temperature": 0,
                                 "n_probs": size or self.vocab_size, "logit_bias": {str(self._probe): FORCE}})
            try:
                entries = engine_entries(_first_choice(answer))
                if not entries:
                    raise read.Malformed("no logprobs entry")
                # The ranking may span the whole vocabulary: only the token sought and the `top`
                # first are read.
                ranked = read.items(read.obj(entries[0], "an entry").get("top_logprobs"), "top_logprobs")
                found = next((t for t in ranked if isinstance(t, dict) and t.get("id") == token), None)
                if found is not None:
                    alternatives = ranked[: min(top, read.MAX_ALTERNATIVES)]
                    return TokenLogprob(raw=raw_token(found, "the token"),
                                        logprob=read.logprob(found.get("logprob"), "the token's logprob"),
                                        top=tuple((raw_token(t, "an alternative"),
                                                   read.logprob(t.get("logprob"), "an alternative's logprob"))
                                                  for t in alternatives))
            except read.READ_ERRORS as exc:
                raise EngineError(f"malformed engine answer: {read.why(exc)}") from None
        raise EngineError(f"token {token} is missing from the engine's distribution")

    def _call(self, body: dict[str, Any]) -> dict[str, Any]:
        answer = self._server.handle_completions({**body, "cache_prompt": True})
        if not isinstance(answer, dict):
            raise EngineError("the engine answered something other than an object")
        if "error" in answer:
            raise EngineError(answer["error"])
        return answer


def _first_choice(answer: dict[str, Any]) -> Any:
    choices = read.items(answer.get("choices"), "choices")
    if not choices:
        raise read.Malformed("an answer has no choice")
    return choices[0]


def _token_id(piece: Any) -> int:
    token_id = read.obj(piece, "a piece").get("id")
    if not isinstance(token_id, int) or isinstance(token_id, bool) or token_id < 0:
        raise read.Malformed("a piece's id is not a token id")
    return token_id
