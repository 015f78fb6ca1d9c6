"""The contract's fixed paths, routed by one lookup (FixedRoutes, http/server/connexion_overrides/fixed_routes.py): in
the app as `gateway serve` builds it, every operation of a path without parameters is linked, with
response validation on or off and behind CORS, and what is not an operation's request still takes
Connexion's way (405 with its Allow header, 404, the docs page, the dashboard). A layer the
linking does not know leaves every request to Connexion's way, and the gateway serves as before.
(Every other test's request to these paths goes through the links too.)"""

from __future__ import annotations

import contextlib
import logging

import httpx
import orjson
import pytest

from gateway import services
from gateway.http.server import app as app_module
from gateway.http.observe import observability
from gateway.http.server.app import spec_path
from gateway.http.server.connexion_overrides.fixed_routes import FixedRoutes
from tests.support.environments import SHARED_TLS, gateway_env
from tests.support.fakes.server import free_port
from tests.support.processes import served_in_process
from tests.support.raw_http import Client

CONTRACT = orjson.loads(spec_path().read_bytes())
FIXED = {(method.upper(), path) for path, item in CONTRACT["paths"].items() if "{" not in path
         for method, operation in item.items() if isinstance(operation, dict) and "operationId" in operation}


@contextlib.contextmanager
def gateway(upstream, database, **env: str):
    """The app in this process, served on loopback; yields its URL and its FixedRoutes layer."""
    settings = services.load_settings(gateway_env(upstream.url, database.url, GATEWAY_PORT=str(free_port()), **env))
    observability.uninstall()
    app = services.create_app(settings)
    try:
        with served_in_process(app, settings) as url:
            yield url, lambda: next(layer for layer in app.middleware.middleware_stack
                                    if isinstance(layer, FixedRoutes))
    finally:
        observability.uninstall()


def complete(url: str, key: str, **extra) -> httpx.Response:
    return httpx.post(f"{url}/v5/completions", headers={"x-api-key": key}, verify=SHARED_TLS,
                      json={"model": "fake/fixed", "prompt": "route me", "max_tokens": 3, **extra})


@pytest.mark.parametrize("env", [{"GATEWAY_VALIDATE_RESPONSES": "1"}, {"GATEWAY_VALIDATE_RESPONSES": "0"},
                                 {"GATEWAY_CORS_ORIGINS": "http://page.example"}],
                         ids=["response-validation", "no-response-validation", "cors"])
def test_every_fixed_operation_is_linked_and_answers_as_the_contract_says(upstream, database, env):
    with gateway(upstream, database, **env) as (url, routes):
        answer = complete(url, database.key)
        assert answer.status_code == 200 and answer.json()["object"] == "text_completion"
        assert routes().linked == FIXED
        # Through the links: the key check, the parameter and body validation, the handler.
        assert complete(url, "not-a-key").status_code == 401
        invalid = complete(url, database.key, max_tokens=-1)
        assert invalid.status_code == 422 and invalid.json()["detail"][0]["loc"] == ["body", "max_tokens"]
        plain = httpx.post(f"{url}/v5/completions", headers={"x-api-key": database.key, "content-type": "text/plain"},
                           content=b"hi", verify=SHARED_TLS)
        assert plain.status_code == 415
        assert httpx.get(f"{url}/v5/usage", params={"bogus": "1"}, headers={"x-api-key": database.key},
                         verify=SHARED_TLS).json()["detail"][0]["loc"] == ["query", "bogus"]
        # Not an operation's request: Connexion's way, as before.
        wrong_method = httpx.get(f"{url}/v5/completions", headers={"x-api-key": database.key}, verify=SHARED_TLS)
        assert wrong_method.status_code == 405 and wrong_method.headers["allow"] == "POST"
        assert httpx.get(f"{url}/v5/nowhere", verify=SHARED_TLS).status_code == 404
        assert httpx.get(f"{url}/docs/", verify=SHARED_TLS).status_code == 200
        assert httpx.get(f"{url}/ui/", verify=SHARED_TLS).status_code == 200


class _Foreign:
    """A layer that may do anything with any path (it has no `prefix`)."""

    def __init__(self, app) -> None:
        self.app = app
        self.requests = 0

    async def __call__(self, scope, receive, send) -> None:
        if scope["type"] == "http":
            self.requests += 1
        await self.app(scope, receive, send)


def test_a_layer_it_does_not_know_leaves_every_request_to_connexions_way(upstream, database, monkeypatch, caplog):
    built = app_module._middlewares
    foreign: list[_Foreign] = []

    def with_a_foreign_layer(*args, **kwargs):
        stack = built(*args, **kwargs)
        at = next(i for i, layer in enumerate(stack) if getattr(layer, "func", None) is FixedRoutes) + 1

        def make(app):
            foreign.append(_Foreign(app))
            return foreign[-1]

        return [*stack[:at], make, *stack[at:]]

    monkeypatch.setattr(app_module, "_middlewares", with_a_foreign_layer)
    with caplog.at_level(logging.WARNING, logger="gateway"), gateway(upstream, database) as (url, routes):
        assert complete(url, database.key).status_code == 200
        assert complete(url, database.key).status_code == 200
        assert routes().linked == frozenset()
        assert foreign[0].requests == 2  # the foreign layer saw each of them
    assert "every request takes Connexion's routing: _Foreign may serve any path" in caplog.text


@pytest.mark.parametrize(("path", "location"), [("/healthz/", "/healthz"), ("/v5/vendors/?x=1", "/v5/vendors?x=1"),
                                                ("/docs", "/docs/")])
def test_a_trailing_slash_redirect_names_a_path_never_the_clients_host(gateway, path, location):
    with Client(gateway.port) as client:
        client.send(f"GET {path} HTTP/1.1\r\nhost: evil.example\r\n\r\n".encode())
        answer = client.answer()
    assert 300 <= answer.status < 400 and answer.headers["location"] == location
