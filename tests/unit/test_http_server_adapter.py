"""vendors/http_server/adapter.py: an `http` vendor as the registry builds it from its configuration:
it serves POST /v5/inference alone, refuses what it cannot serve as the configuration loads, and
sends the key in the configured header and nothing else of its own."""

from __future__ import annotations

import pytest

from gateway.core.config import Settings, VendorConfig
from gateway.core.endpoint import Endpoint
from gateway.core.errors import ConfigError
from gateway.vendors import registry
from gateway.vendors.http_server.adapter import HttpServerAdapter


def build(**options: str) -> HttpServerAdapter:
    config = VendorConfig(name="tgi", protocol="http", base_url="http://127.0.0.1:9", api_key="k-1",
                          options={"path": "/generate", **options})
    return registry.build(config, Settings())  # type: ignore[return-value]


def test_it_serves_native_inference_alone():
    adapter = build()
    assert isinstance(adapter, HttpServerAdapter) and set(adapter.translators) == {Endpoint.INFERENCE}
    assert HttpServerAdapter.capabilities_of == {}


@pytest.mark.parametrize(("options", "says"), [({"stream_format": "json_lines"}, "json_lines"),
                                               ({"path": "/../admin"}, "cannot leave the base URL"),
                                               ({"key_header": "host"}, "frames, routes or describes")])
def test_what_it_cannot_serve_stops_the_start(options, says):
    with pytest.raises(ConfigError, match=says):
        build(**options)


def test_without_a_base_url_it_stops_the_start():
    with pytest.raises(ConfigError, match="needs a base_url"):
        registry.build(VendorConfig(name="tgi", protocol="http", options={"path": "/generate"}), Settings())


@pytest.mark.parametrize(("options", "sent"), [({}, {"authorization": "Bearer k-1"}),
                                               ({"key_header": "x-api-key", "key_scheme": ""}, {"x-api-key": "k-1"})])
def test_the_key_rides_in_the_configured_header_alone(options, sent):
    assert build(**options)._headers("k-1") == sent
