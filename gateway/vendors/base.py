"""The vendor adapter protocol, and the translator of one endpoint in it.

An adapter speaks one vendor wire protocol (one folder here: openai/, anthropic/, gemini/, local/).
It holds what every endpoint of the protocol shares (its options, its deployments or engine, its
error translation) and one translator per endpoint it serves (`translators`), each turning that
endpoint's vendor call (core/completion.py `CompletionCall`, core/chat.py `ChatCall`) into the
vendor's requests and the vendor's answers back into `Choice`s, `Chunk`s and `Usage`. It knows
nothing of the HTTP server, accounts or the ledger; the planner decides what each call asks for,
after checking the translator's `capabilities` (gateway/core/parameters.py).

A protocol is one folder here whose adapter class has:
- `protocol`, its name in the configuration;
- `default_base_url`, where a vendor of the protocol is when its configuration names no
  `base_url` ("" when it must name one), and `hosted_url`, the hosted service the protocol is
  named after ("" for none): `<PROTOCOL>_API_KEY` then configures a vendor of that name there;
- `Options`, a pydantic model of its own configuration options (environment names derive from
  them: GATEWAY_VENDOR_<NAME>_<OPTION>);
- `capabilities_of`, for each endpoint it serves, its support record for every parameter of that
  endpoint from given options (what `make docs` and GET /v5/vendors show);
- `translators`, for each endpoint it serves, the translator of that endpoint (`Translator`): an
  endpoint without one is refused by name (vendors/registry.py `Registry.serving`);
plus one line in gateway/vendors/registry.py.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Mapping
from typing import Any, ClassVar, Protocol, TypeVar, runtime_checkable

from pydantic import BaseModel

from gateway.core.completion import Chunk, Result
from gateway.core.endpoint import Endpoint
from gateway.core.parameters import Capabilities
from gateway.vendors.transport.balancer import Balancer

C = TypeVar("C", contravariant=True)  # the endpoint's vendor call


class Translator(Protocol[C]):
    """One endpoint in one protocol: its capabilities, and its vendor calls to the vendor and back."""

    @property
    def capabilities(self) -> Capabilities:
        """The support record of every parameter of the endpoint (it may change once the vendor's
        server is identified: vendors/openai/servers.py)."""

    async def complete(self, call: C) -> Result:
        """The vendor's answer. Like `stream`, it awaits the call's clearance (core/clearance.py)
        at the last moment before the vendor is asked (HttpAdapter's requests do): until then the
        request's limits may still refuse it."""

    def stream(self, call: C) -> AsyncIterator[list[Chunk]]:
        """Chunks as the vendor produces them, in lists of those that arrived together (one
        list per read of the vendor's stream, never empty); the last chunk carries the usage."""


class Adapter(Protocol):
    protocol: ClassVar[str]
    default_base_url: ClassVar[str]
    hosted_url: ClassVar[str]
    Options: ClassVar[type[BaseModel]]
    capabilities_of: ClassVar[Mapping[Endpoint, Callable[[Any], Capabilities]]]
    name: str  # the configured vendor name, the part before "/" in `model`
    translators: Mapping[Endpoint, Translator[Any]]

    async def start(self) -> None:
        """Open pools, load models. Called once by the app's lifespan."""

    async def close(self) -> None:
        """Release everything start() acquired."""

    def not_ready(self) -> str | None:
        """None when requests can be served, else why not (shown by /readyz)."""


@runtime_checkable
class CountsTokens(Protocol):
    """Optional for an adapter: count tokens with the model's own tokenizer.

    The gateway counts tokens itself only when the vendor did not report usage (a stream cut
    short, a vendor without usage); the row is then marked estimated. Adapters without this
    method are counted with an OpenAI vocabulary (gateway/store/tokens.py). Called from a worker
    thread, so it must not touch the event loop."""

    def count_tokens(self, model: str, text: str) -> int: ...


@runtime_checkable
class RefusesValues(Protocol[C]):
    """Optional for a translator: what of a call its vendor cannot be given although its record
    (per parameter) takes the parameter: an image it cannot read, a participant's name... (the
    parameter, why): the planner answers a 400 naming them before any vendor call; None when it
    can take everything. Anthropic's, Gemini's and the local model's chat (vendors/conversation.py)."""

    def refused(self, call: C) -> tuple[str, str] | None: ...


@runtime_checkable
class Balanced(Protocol):
    """Optional for an adapter: it serves from deployments, one picked per try by its `balancer`
    (vendors/transport/balancer.py), whose state GET /v5/vendors shows (and a metrics layer may read)."""

    balancer: Balancer
