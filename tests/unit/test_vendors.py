"""GET /v5/vendors (handlers/vendors.py): what it shows of an endpoint a vendor's protocol has no
translator for."""

from __future__ import annotations

from typing import Any

from gateway.core.endpoint import Endpoint
from handlers.vendors import served


class CompletionsOnly:
    protocol = "scripted"

    def __init__(self) -> None:
        self.name = "v"
        self.translators: dict[Endpoint, Any] = {}


def test_an_endpoint_without_a_translator_shows_every_parameter_unsupported_naming_it():
    for endpoint, parameter in ((Endpoint.CHAT, "messages"), (Endpoint.COMPLETIONS, "prompt")):
        record = served(CompletionsOnly(), endpoint)  # type: ignore[arg-type]
        assert all(found.kind == "unsupported" for found in record.values())
        assert endpoint.path in (record[parameter].detail or "")
