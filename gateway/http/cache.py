"""The response cache as a request meets it (docs/cache.md): whether a request may be served from
the cache, its key, the entry kept of a complete answer, and the chunks a hit streams.

What is cached is exact and deterministic only: a request with `temperature` 0 or a `seed` given,
unless its client asks for a sampled answer to be cached too (`x-gateway-cache: force`). The key
is a digest of the entry format's version, the endpoint, the account, the model asked for
("vendor/name", the first of its fallback chain) and the canonical form of the validated request:
contract defaults written out, numbers written one way, keys sorted, and `stream`,
`stream_options`, `user` left out (they change how an answer is delivered and attributed, not what
it says). So one account's entries never answer another account, and an upgrade that changes the
entry's shape (`VERSION`) never reads an old one.

Per request, `x-gateway-cache`:
    off             neither read nor write the cache (the answer says `bypass`)
    refresh         call the vendor, and keep its answer in place of the entry
    only-if-cached  a hit, or a 504 without calling any vendor (HTTP's `only-if-cached`)
    force           cache this request even though it samples (no temperature 0, no seed)
and `x-gateway-cache-ttl: <seconds>` keeps the answer that long instead of GATEWAY_CACHE_TTL_SECONDS.
Every answer says what the cache did: `x-gateway-cache: hit`, `miss` or `bypass`.

An entry is kept only of a complete, successful answer whose usage the vendor reported (never an
error, a cut stream, an estimate), served by the model asked for (not a fallback's). A chat
answer's tool calls are kept whole (a stream's pieces joined by index, as OpenAI's SDKs join them:
http/cache_relay.py), and a hit streams each in one piece.
"""

from __future__ import annotations

import dataclasses
import hashlib
from collections.abc import AsyncIterator, Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

import orjson
from starlette.datastructures import Headers

from gateway.core.chat import ChatChoice
from gateway.core.completion import Choice, Chunk, Usage
from gateway.core.demand import Demand
from gateway.core.endpoint import CONVERSATIONS, Endpoint
from gateway.core.errors import GatewayError, ValidationFailed
from gateway.core.inference import NativeChoice
from gateway.http.context import HandlerRequest
from gateway.http.observe import metrics
from gateway.limits.rules import ACCOUNT, KEY, Subject
from gateway.limits.table import LimitsTable
from gateway.store.response_cache import Store

# Of the key's canonical form and of the entry's shape: a change makes every old entry unreachable
# (2: a chat choice's tool calls; a gateway of version 1 beside it would serve them without).
VERSION = 2
HEADER = "x-gateway-cache"
TTL_HEADER = "x-gateway-cache-ttl"
HIT, MISS, BYPASS = "hit", "miss", "bypass"  # what an answer's x-gateway-cache says
OFF, REFRESH, ONLY_IF_CACHED, FORCE = "off", "refresh", "only-if-cached", "force"  # what a request may ask
ASKED = (OFF, REFRESH, ONLY_IF_CACHED, FORCE)
MAX_TTL = 30 * 86400  # seconds; the longest an entry may be asked to live

class CacheMiss(GatewayError):
    """`only-if-cached` and nothing cached: no vendor is called (HTTP's 504 for it)."""

    status = 504
    type = "cache_miss"


def deterministic(form: Mapping[str, Any]) -> bool:
    """Whether the same request gives the same answer: greedy (temperature 0) or seeded."""
    return form.get("temperature") == 0 or form.get("seed") is not None


def key(endpoint: Endpoint, account: str, model: str, form: Mapping[str, Any]) -> str:
    """The entry's key: a digest of everything that makes the answer what it is, and whose it is."""
    canonical = orjson.dumps([VERSION, endpoint, account, model, form], option=orjson.OPT_SORT_KEYS)
    return hashlib.sha256(canonical).hexdigest()


# -- what a request asks of the cache ----------------------------------------------------------
def asked(headers: Headers) -> tuple[str | None, float | None]:
    """The request's x-gateway-cache and x-gateway-cache-ttl (a 422 naming the header when wrong)."""
    # openapi.json declares both (the request's validation refuses a value outside them); the
    # bounds are checked here too, where a pattern cannot say them.
    value = headers.get(HEADER)
    if value is not None:
        if value not in ASKED:
            raise _header_error(HEADER, f"must be one of {', '.join(ASKED)}", value)
    ttl = headers.get(TTL_HEADER)
    if ttl is None:
        return value, None
    try:
        seconds = int(ttl.strip())
    except ValueError:
        raise _header_error(TTL_HEADER, "must be a whole number of seconds", ttl) from None
    if not 1 <= seconds <= MAX_TTL:
        raise _header_error(TTL_HEADER, f"must be from 1 to {MAX_TTL} seconds", ttl)
    return value, float(seconds)


def _header_error(name: str, message: str, value: str) -> ValidationFailed:
    return ValidationFailed([{"loc": ["header", name], "msg": f"{name} {message}", "type": "value_error",
                              "input": value}])


def allowed(table: LimitsTable, key_id: str, account: str) -> bool:
    """The key's switch (`gateway limits set --key ... --cache on|off`), else its account's, else on."""
    for subject in (Subject(KEY, key_id), Subject(ACCOUNT, account)):
        limits = table.subjects.get(subject)
        if limits is not None and limits.cache is not None:
            return limits.cache
    return True


# -- an entry ----------------------------------------------------------------------------------
@dataclass(slots=True)
class Entry:
    """A complete answer as the cache keeps it: its choices (with their finish reasons and
    logprobs), the usage the client was told, the vendor's system fingerprint."""

    choices: list[Choice]
    usage: Usage
    system_fingerprint: str | None = None


def storable(choices: Iterable[Choice], usage: Usage | None) -> bool:
    """Whether an answer may be kept: its usage reported by the vendor, and its tool calls whole
    (each with its id and function name). `choices` are what the entry holds (`kept`)."""
    if usage is None or usage.estimated:
        return False
    return all(_whole(c) for c in choices if isinstance(c, ChatChoice))


def kept(choices: Iterable[Choice]) -> list[Choice] | None:
    """The choices an entry holds of an answer: the gateway's own, or for a vendor's own answer (a
    `NativeChoice`) the choice that stands for it (`as_chat`); None when one has none."""
    found = [c.as_chat if isinstance(c, NativeChoice) else c for c in choices]
    return None if None in found else found  # type: ignore[return-value]


def _whole(choice: ChatChoice) -> bool:
    calls = choice.tool_calls or []
    function = choice.function_call
    return (all(call.get("id") and "index" not in call and (call.get("function") or {}).get("name") for call in calls)
            and (function is None or bool(function.get("name"))))


def encode(entry: Entry) -> bytes:
    usage = entry.usage
    return orjson.dumps({
        "v": VERSION,
        "choices": [{"index": c.index, "text": c.text, "finish_reason": c.finish_reason, "logprobs": c.logprobs,
                     **({"refusal": c.refusal, "tool_calls": c.tool_calls, "function_call": c.function_call}
                        if isinstance(c, ChatChoice) else {})} for c in entry.choices],
        "usage": {"prompt_tokens": usage.prompt_tokens, "completion_tokens": usage.completion_tokens,
                  "prompt_tokens_details": usage.prompt_tokens_details,
                  "completion_tokens_details": usage.completion_tokens_details},
        "system_fingerprint": entry.system_fingerprint,
    })


def decode(raw: bytes, chat: bool) -> Entry | None:
    """The entry of `raw` (new objects each time: a stream marks its choices as it sends them);
    None when it is not one this version wrote."""
    try:
        data = orjson.loads(raw)
        if data.get("v") != VERSION:
            return None
        kind = ChatChoice if chat else Choice
        choices = [kind(c["index"], c["text"], c["finish_reason"], c["logprobs"],
                        **({"refusal": c.get("refusal"), "tool_calls": c.get("tool_calls"),
                            "function_call": c.get("function_call")} if chat else {})) for c in data["choices"]]
        u = data["usage"]
        usage = Usage(u["prompt_tokens"], u["completion_tokens"], u["prompt_tokens_details"],
                      u["completion_tokens_details"])
        return Entry(choices, usage, data["system_fingerprint"])
    except (orjson.JSONDecodeError, KeyError, TypeError, AttributeError):
        return None


def chunks(entry: Entry) -> list[Chunk]:
    """A hit as a stream's chunks, the sequence a vendor's stream makes: each choice begun (a chat
    choice's role), its whole text (and logprobs, refusal, each tool call in one piece with its
    index), its finish reason, then the usage."""
    chat = any(isinstance(c, ChatChoice) for c in entry.choices)
    kind = ChatChoice if chat else Choice
    begun = [kind(c.index, "") for c in entry.choices]
    text = [dataclasses.replace(c, finish_reason=None, **({"tool_calls": [
        {"index": i, **call} for i, call in enumerate(c.tool_calls)]} if isinstance(c, ChatChoice) and c.tool_calls
        else {})) for c in entry.choices]
    finished = [kind(c.index, "", c.finish_reason or "stop") for c in entry.choices]
    return [Chunk(begun), Chunk(text), Chunk(finished), Chunk([], usage=entry.usage, billed=entry.usage)]


async def NO_MORE() -> AsyncIterator[list[Chunk]]:  # noqa: N802 (a hit's stream has no rest)
    return
    yield


# -- a request's lookup ------------------------------------------------------------------------
@dataclass(slots=True)
class Lookup:
    """What the cache did for a request, and where its answer is to be kept."""

    state: str  # HIT, MISS or BYPASS: the answer's x-gateway-cache
    model: str = ""  # the model the key is for: an answer by another (a fallback) is not kept
    key: str | None = None  # where the answer is kept (None: it is not)
    store: Store | None = None
    ttl: float = 0.0
    entry: Entry | None = None  # a hit's
    only_if_cached: bool = False
    price_share: float = 0.0  # what a hit is billed, of its tokens' price (GATEWAY_CACHE_HIT_PRICE)

    def demand(self, demand: Demand) -> Demand:
        """What the limits are asked for: a hit is a request (RPM, concurrency) that uses no vendor's
        tokens, billed `price_share` of its entry's tokens' price (what a budget in dollars reserves)."""
        if self.entry is None:
            return demand
        usage = self.entry.usage
        return dataclasses.replace(demand, prompts_sent=(), completion_tokens=usage.completion_tokens,
                                   prompt_tokens=usage.prompt_tokens, hit_share=self.price_share)

    def header(self) -> dict[str, str]:
        return {HEADER: self.state}

    def refuse(self) -> None:
        """`only-if-cached` without an entry: the 504, with no vendor called."""
        if self.only_if_cached and self.entry is None:
            raise CacheMiss("x-gateway-cache: only-if-cached, and this request's answer is not in the cache",
                            code="cache_miss", headers={HEADER: self.state})

    async def keep(self, model: str, entry: Entry | None) -> None:
        """The answer of the request, by `model`: kept when it may be (see the module)."""
        if self.key is None or self.store is None or entry is None or model != self.model:
            return
        value = encode(entry)
        if await self.store.put(self.key, value, self.ttl):
            metrics.cache_stored(len(value), self.store.held_bytes)


BYPASSED = Lookup(BYPASS)


async def look_up(request: HandlerRequest, account: str, endpoint: Endpoint, model: str,
                  form: Callable[[], Mapping[str, Any]]) -> Lookup:
    """The request's lookup: a hit (its entry), a miss (where its answer goes), or a bypass.
    `form()` is the request's canonical form (made only when the cache may serve it)."""
    wants, ttl = asked(request.headers)
    services = request.services
    store = services.cache
    only = wants == ONLY_IF_CACHED
    canonical = None if store is None or wants == OFF else form()
    if canonical is None or not (wants == FORCE or deterministic(canonical)) \
            or not allowed(services.limiter.table, request.caller.key_id, account):
        if store is not None:
            metrics.cache_looked_up(BYPASS)
        return Lookup(BYPASS, only_if_cached=True) if only else BYPASSED
    assert store is not None
    where = key(endpoint, account, model, canonical)
    looked = Lookup(MISS, model, where, store, ttl or services.settings.cache_ttl_seconds, only_if_cached=only,
                    price_share=services.settings.cache_hit_price)
    if wants != REFRESH:
        raw = await store.get(where)
        if raw is not None and (entry := decode(raw, chat=endpoint in CONVERSATIONS)) is not None:
            looked.state, looked.entry = HIT, entry
    metrics.cache_looked_up(looked.state)
    return looked
