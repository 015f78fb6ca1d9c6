"""The vendors by name (gateway/vendors/registry.py): an endpoint a vendor's protocol has no
translator for is refused by name, before any vendor call."""

from __future__ import annotations

from typing import Any

import pytest

from gateway.core.endpoint import Endpoint
from gateway.core.errors import BadRequest, NotFound
from gateway.vendors.registry import PROTOCOLS, Registry


class CompletionsOnly:
    protocol = "scripted"

    def __init__(self) -> None:
        self.name = "v"
        self.translators: dict[Endpoint, Any] = {Endpoint.COMPLETIONS: object()}


def test_an_endpoint_without_a_translator_is_refused_naming_vendor_and_endpoint():
    registry = Registry({"v": CompletionsOnly()})  # type: ignore[dict-item]
    assert registry.serving("v", "m", Endpoint.COMPLETIONS).name == "v"
    with pytest.raises(BadRequest) as refused:
        registry.serving("v", "m", Endpoint.CHAT)
    assert (refused.value.code, refused.value.vendor, refused.value.param) == ("unsupported_endpoint", "v", "model")
    assert "'v'" in refused.value.message and "/v5/chat/completions" in refused.value.message
    with pytest.raises(NotFound):
        registry.serving("nowhere", "m", Endpoint.COMPLETIONS)


@pytest.mark.parametrize("protocol", sorted(PROTOCOLS))
def test_every_protocol_declares_a_complete_record_for_each_endpoint_it_serves(protocol):
    adapter = PROTOCOLS[protocol]
    # A protocol that serves only POST /v5/inference (args is the vendor's own: no parameters of the
    # gateway's) keeps no record, whatever its options need.
    if not adapter.capabilities_of:
        assert protocol == "http", "only the http protocol serves no endpoint with parameters of the gateway's"
        return
    options = adapter.Options.model_validate({})
    for endpoint, record_of in adapter.capabilities_of.items():
        assert isinstance(endpoint, Endpoint)
        assert record_of(options).protocol == protocol  # complete, or it raises as it is made
    # Every protocol with a record serves the three conversational endpoints (responses bridged to chat).
    assert {Endpoint.COMPLETIONS, Endpoint.CHAT, Endpoint.RESPONSES} <= set(adapter.capabilities_of)

