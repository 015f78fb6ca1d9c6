"""The vendor adapter protocol.

An adapter speaks one vendor wire protocol. It turns a `CompletionCall` into vendor requests and
the vendor's answers back into `Choice`s, `Chunk`s and `Usage` (gateway/core/completion.py). It
knows nothing of the HTTP server, accounts or the ledger; the planner decides what each call asks
for, after checking the adapter's `Capabilities` (gateway/core/parameters.py).

A protocol is one module here that defines an adapter class with:
- `protocol`, its name in the configuration;
- `default_base_url`, where a vendor of the protocol is when its configuration names no
  `base_url` ("" when it must name one), and `hosted_url`, the hosted service the protocol is
  named after ("" for none): `<PROTOCOL>_API_KEY` then configures a vendor of that name there;
- `Options`, a pydantic model of its own configuration options (environment names derive from
  them: GATEWAY_VENDOR_<NAME>_<OPTION>);
- `capabilities_of(options)`, its support record for every request parameter;
- `chat_capabilities`, its record for every chat parameter (`parameters.no_chat` when it serves
  none), and `chat_complete` / `chat_stream` for a `ChatCall` (gateway/core/chat.py), answered
  with `ChatChoice`s;
plus one line in gateway/vendors/registry.py.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from typing import Any, ClassVar, Protocol, runtime_checkable

from pydantic import BaseModel

from gateway.core.chat import ChatCall
from gateway.core.completion import Chunk, CompletionCall, Result
from gateway.core.parameters import Capabilities
from gateway.vendors.transport.balancer import Balancer


class Adapter(Protocol):
    protocol: ClassVar[str]
    default_base_url: ClassVar[str]
    hosted_url: ClassVar[str]
    Options: ClassVar[type[BaseModel]]
    capabilities_of: ClassVar[Callable[[Any], Capabilities]]
    chat_capabilities_of: ClassVar[Callable[[Any], Capabilities]]
    name: str  # the configured vendor name, the part before "/" in `model`
    capabilities: Capabilities
    chat_capabilities: Capabilities

    async def start(self) -> None:
        """Open pools, load models. Called once by the app's lifespan."""

    async def close(self) -> None:
        """Release everything start() acquired."""

    def not_ready(self) -> str | None:
        """None when requests can be served, else why not (shown by /readyz)."""

    async def complete(self, call: CompletionCall) -> Result:
        """The vendor's answer. Like `stream`, it awaits `core.completion.cleared()` at the last
        moment before the vendor is asked (HttpAdapter's requests do): until then the request's
        limits may still refuse it."""

    def stream(self, call: CompletionCall) -> AsyncIterator[list[Chunk]]:
        """Chunks as the vendor produces them, in lists of those that arrived together (one
        list per read of the vendor's stream, never empty); the last chunk carries the usage."""

    async def chat_complete(self, call: ChatCall) -> Result:
        """The vendor's chat answer, as `complete` (awaiting `cleared()` as late)."""

    def chat_stream(self, call: ChatCall) -> AsyncIterator[list[Chunk]]:
        """A chat answer's chunks as the vendor produces them, as `stream`."""


@runtime_checkable
class CountsTokens(Protocol):
    """Optional for an adapter: count tokens with the model's own tokenizer.

    The gateway counts tokens itself only when the vendor did not report usage (a stream cut
    short, a vendor without usage); the row is then marked estimated. Adapters without this
    method are counted with an OpenAI vocabulary (gateway/store/tokens.py). Called from a worker
    thread, so it must not touch the event loop."""

    def count_tokens(self, model: str, text: str) -> int: ...


@runtime_checkable
class RefusesValues(Protocol):
    """Optional for an adapter: what of a chat call its vendor cannot be given although its chat
    record (per parameter) takes the parameter: an image it cannot read, a participant's name...
    (the parameter, why): the planner answers a 400 naming them before any vendor call; None when
    it can take everything. Anthropic's and Gemini's chat (vendors/conversation.py)."""

    def chat_refused(self, call: ChatCall) -> tuple[str, str] | None: ...


@runtime_checkable
class Balanced(Protocol):
    """Optional for an adapter: it serves from deployments, one picked per try by its `balancer`
    (vendors/transport/balancer.py), whose state GET /v5/vendors shows (and a metrics layer may read)."""

    balancer: Balancer
