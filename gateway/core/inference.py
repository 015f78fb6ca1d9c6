"""A vendor-native call (POST /v5/inference): the vendor's own request body, which the gateway
does not read beyond what its rules need (gateway/endpoints/inference/), and the vendor's answer as
it came.

An `InferenceCall` is one call: no fan-out (the vendor's body says how many choices it wants, and
the vendor makes them), no parameters the planner judges (the body is the vendor's). Its
translators (vendors/<protocol>/inference.py) send `body` to the protocol's native endpoint and
give back each answer, or each stream event, as a `NativeChoice` holding the vendor's bytes: the
endpoint reads them (JSON, depth, usage, the vendor's own end), since only it knows the rules.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, ClassVar

from gateway.core.clearance import CLEAR, Clearance
from gateway.core.completion import Choice
from gateway.core.endpoint import Endpoint


@dataclass(slots=True)
class InferenceCall:
    """One vendor-native call (core/completion.py `Call`)."""

    endpoint: ClassVar[Endpoint] = Endpoint.INFERENCE

    model: str  # the vendor's own model name (what follows "vendor/")
    body: dict[str, Any]  # the vendor's body: the client's args, prepared (endpoints/inference/guard.py)
    stream: bool
    prompts: list[str]  # the text of args: what an estimate of its prompt counts
    # The request's own retries and timeout (inference_configuration), within the vendor's; None:
    # the vendor's. The transport reads `retries`; the endpoint's plan keeps `timeout` (seconds,
    # the whole call, a stream to its end).
    retries: int | None = None
    timeout: float | None = None
    most: int | None = None  # the most tokens the vendor may generate, when args bounds it
    served_by: list[str] = field(default_factory=list)
    clearance: Clearance = CLEAR

    @property
    def n(self) -> int:
        return 1  # the vendor's body says how many choices; the gateway makes one call of it

    @property
    def max_tokens(self) -> int | None:
        """The output bound `args` sets (tracing's gen_ai.request.max_tokens), None when it sets none."""
        return self.most

    def given(self, name: str) -> Any:
        return None  # no parameter of the gateway's: args is the vendor's

    def most_tokens(self) -> int | None:
        return self.most

    def split(self, prompts: list[str], n: int, seed: int | None) -> InferenceCall:
        return self  # never fanned out


@dataclass(slots=True)
class NativeChoice(Choice):
    """A vendor's whole answer, or one event of its stream, as the vendor sent it (`raw`: the
    answer's decoded JSON, or the event's data text), and once the endpoint read it, what it holds
    (`response`) and its generated text (`text`: what an estimate counts, what the meter hears)."""

    raw: Any = None
    response: Any = None
    # The answer as a choice of the gateway's, where one can say all of it (a Responses answer as
    # chat's: endpoints/responses/native.py `chat_choice`): what the response cache keeps of it
    # (http/cache.py). None: the answer is not cached.
    as_chat: Choice | None = None
