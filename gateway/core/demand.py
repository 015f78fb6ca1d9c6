"""A request as its limits see it, whatever its endpoint: made by the endpoint's unit
(gateway/endpoints/<name>/), asked of the limits by the request's lifecycle (limits/on_request.py)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from gateway.core.endpoint import Endpoint


@dataclass(slots=True)
class Demand:
    """The model a request asks for, the tokens it may use at most, and what its ledger row says of
    it if a limit refuses it. Its prompts are counted only when a limit asks (limits/on_request.py
    `prompt_tokens`): a request under no limit never pays for it."""

    endpoint: Endpoint  # what the ledger's row of a refusal says it came through
    model: str
    prompts_sent: Sequence[str]  # each prompt as often as a vendor call carries it
    completion_tokens: int
    streamed: bool = False
    user: str | None = None
    # Counted already (a cache hit's entry says it), or once a limit asked (limits/on_request.py).
    prompt_tokens: int | None = None
    # A cache hit's (http/cache.py): the share of its tokens' price it is billed. It uses no vendor's
    # tokens, and reserves what it is billed of a budget in dollars.
    hit_share: float | None = None
