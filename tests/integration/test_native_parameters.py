"""A parameter declared native is one the vendor takes: parametrized over the capability records that
GET /v5/vendors serves (every vendor protocol, every OpenAI-compatible server the gateway knows, both
endpoints, every parameter declared native), each one is sent through a real gateway to a fake that
refuses every field its real counterpart does not take (tests/support/fakes/server_profiles.py,
anthropic_upstream.py, gemini_upstream.py). The fake must have taken it, the vendor's request must
carry it (an adapter that drops it sends what it sends without it), and the answer must show it
where an answer can (choices, length, stop, logprobs, tool calls, JSON). A false "native" fails here.
"""

from __future__ import annotations

import json
from typing import Any

import httpx
import pytest

from gateway.core.endpoint import Endpoint
from gateway.core.config import VendorConfig
from gateway.core.parameters import NATIVE, Support
from gateway.planner.capabilities import verdicts
from gateway.vendors import registry
from handlers.vendors import describe
from tests.support.environments import ANTHROPIC_SECRET, GEMINI_SECRET, SHARED_TLS
from tests.support.fakes.anthropic_upstream import FakeAnthropic
from tests.support.fakes.gemini_upstream import FakeGemini
from tests.support.fakes.openai_upstream import FakeOpenAI
from tests.support.fakes.server import ServerThread
from tests.support.fakes.server_profiles import PROFILES
from tests.support.gateway_process import GatewayProcess
from tests.support.parameter_examples import CHAT, CHAT_COMPANIONS, COMPLETIONS, example

# Every vendor protocol (its default options, as docs/capabilities.md shows it), and an `openai`
# vendor in front of each compatible server the gateway knows, found out as it starts from the
# fake's GET /v1/models (the `server` option at `auto`) but for OpenAI itself, which is named.
SERVER_VENDORS = {profile.replace(".", ""): profile for profile in PROFILES}  # "llama.cpp" -> vendor "llamacpp"
VENDORS: dict[str, tuple[str, dict[str, str]]] = {
    **{vendor: ("openai", {"server": profile}) for vendor, profile in SERVER_VENDORS.items()},
    "anthropic": ("anthropic", {}),
    "gemini": ("gemini", {"max_candidates": "4"}),
}
ENDPOINTS = {COMPLETIONS: "/v5/completions", CHAT: "/v5/chat/completions"}
# What the vendor is asked besides the parameter under test (its baseline), the required fields given
# another value than the parameter's example.
BASELINE = {COMPLETIONS: {"prompt": "pa", "max_tokens": 4},
            CHAT: {"messages": [{"role": "user", "content": "hello"}]}}  # fmt: skip


def _records(vendor: str) -> dict[str, dict[str, Support]]:
    protocol, options = VENDORS[vendor]
    adapter, parsed = registry.options_of(VendorConfig(name=vendor, protocol=protocol, options=options))
    return {COMPLETIONS: verdicts(adapter.capabilities_of[Endpoint.COMPLETIONS](parsed)),
            CHAT: verdicts(adapter.capabilities_of[Endpoint.CHAT](parsed))}


RECORDS = {vendor: _records(vendor) for vendor in VENDORS}
CASES = [(vendor, endpoint, name, found) for vendor, records in RECORDS.items()
         for endpoint, verdict in records.items() for name, found in verdict.items() if found.kind == NATIVE]


@pytest.fixture(scope="module")
def fakes():
    made = {vendor: FakeOpenAI(server=profile) for vendor, profile in SERVER_VENDORS.items()}
    made |= {"anthropic": FakeAnthropic(), "gemini": FakeGemini()}
    servers = {vendor: ServerThread(fake) for vendor, fake in made.items()}
    for server in servers.values():
        server.__enter__()
    try:
        yield {vendor: (made[vendor], servers[vendor].url) for vendor in made}
    finally:
        for server in servers.values():
            server.__exit__(None, None, None)


@pytest.fixture(scope="module")
def native_gateway(fakes, database):
    env = {"GATEWAY_DATABASE_URL": database.url, "GATEWAY_VENDOR_LOCAL_ENABLED": "0", "GATEWAY_VALIDATE_RESPONSES": "1"}
    for vendor, (protocol, options) in VENDORS.items():
        _, url = fakes[vendor]
        prefix = f"GATEWAY_VENDOR_{vendor.upper()}_"
        base_url, key = {"anthropic": (url, ANTHROPIC_SECRET), "gemini": (f"{url}/v1beta", GEMINI_SECRET)}.get(
            vendor, (f"{url}/v1", "sk-compatible"))
        env |= {prefix + "PROTOCOL": protocol, prefix + "BASE_URL": base_url, prefix + "API_KEY": key,
                prefix + "RETRIES": "0"}  # fmt: skip
        # A compatible server is identified as the gateway starts; OpenAI itself is named.
        env |= {prefix + name.upper(): value for name, value in options.items()
                if not (name == "server" and value != "openai")}
    with GatewayProcess(env) as process:
        yield process


@pytest.fixture
def client(native_gateway, database):
    with httpx.Client(base_url=native_gateway.url, headers={"x-api-key": database.key}, timeout=30,
                      verify=SHARED_TLS) as c:
        yield c


def test_the_cases_are_what_the_vendors_operation_serves(client):
    """The parametrization is GET /v5/vendors' data: the same records, each compatible server
    identified as the fake says it is."""
    served = {vendor["name"]: vendor for vendor in client.get("/v5/vendors").json()["data"]}
    for vendor, (protocol, options) in VENDORS.items():
        assert served[vendor].get("server") == options.get("server"), vendor
        assert served[vendor]["parameters"] == describe(vendor, protocol, _capabilities(vendor))["parameters"]
        for endpoint, field in ((COMPLETIONS, "parameters"), (CHAT, "chat_parameters")):
            natives = {name for name, found in served[vendor][field].items() if found["support"] == NATIVE}
            assert natives == {name for v, e, name, _ in CASES if (v, e) == (vendor, endpoint)}, (vendor, endpoint)


def _capabilities(vendor: str):
    protocol, options = VENDORS[vendor]
    adapter, parsed = registry.options_of(VendorConfig(name=vendor, protocol=protocol, options=options))
    return adapter.capabilities_of[Endpoint.COMPLETIONS](parsed)


@pytest.mark.parametrize(("vendor", "endpoint", "name", "found"), CASES,
                         ids=[f"{v}-{e}-{n}" for v, e, n, _ in CASES])
def test_a_native_parameter_is_taken_by_the_vendor(client, fakes, vendor, endpoint, name, found):
    fake, _ = fakes[vendor]
    value = example(endpoint, name)
    baseline = {"model": f"{vendor}/m", **BASELINE[endpoint], **(CHAT_COMPANIONS.get(name, {}) if endpoint == CHAT
                                                                 else {})}
    sent_without = _served(client, fake, endpoint, baseline)
    answer, sent = _send(client, fake, endpoint, baseline | {name: value})
    assert answer.status_code == 200, f"{vendor} was sent {name}={value!r} as native, and: {answer.text}"
    assert getattr(fake, "violations", []) == [], fake.violations
    if found.per_call is None:
        assert all(_carries(vendor, call, name) for call in sent), (name, sent)
        assert sent != sent_without, f"{vendor}'s request is the same with {name} as without: {sent}"
    else:  # fanned out: as many vendor calls as the value needs
        assert len(sent) == -(-_size(value) // found.per_call), (name, sent)
    check = OBSERVED[endpoint].get(name)
    if check is not None:
        body = answer.json()
        assert check(body), f"{vendor}'s answer does not show {name}={value!r}: {json.dumps(body)[:2000]}"


def _served(client: httpx.Client, fake: Any, endpoint: str, body: dict[str, Any]) -> list[dict[str, Any]]:
    answer, sent = _send(client, fake, endpoint, body)
    assert answer.status_code == 200, f"the baseline request failed: {answer.text}"
    return sent


def _send(client: httpx.Client, fake: Any, endpoint: str, body: dict[str, Any]) -> tuple[httpx.Response,
                                                                                        list[dict[str, Any]]]:
    fake.clear()
    answer = client.post(ENDPOINTS[endpoint], json=body)
    return answer, [request["body"] for request in fake.requests]


def _carries(vendor: str, call: dict[str, Any], name: str) -> bool:
    """Whether a vendor call carries the parameter: by its own name on the OpenAI wire (the contract
    is that protocol); a translating protocol's request is compared with its baseline instead."""
    return VENDORS[vendor][0] != "openai" or name in call


def _size(value: Any) -> int:
    return len(value) if isinstance(value, list) else int(value)


# -- what an answer shows ---------------------------------------------------------------------------
def _choices(body: dict[str, Any]) -> list[dict[str, Any]]:
    return body["choices"]


def _texts(body: dict[str, Any]) -> list[str]:
    return [c["text"] if "text" in c else c["message"]["content"] or "" for c in _choices(body)]


def _words_and_finish(count: int, finish: str):
    return lambda body: all(len(text.split()) == count for text in _texts(body)) and \
        {c["finish_reason"] for c in _choices(body)} == {finish}


def _called(body: dict[str, Any]) -> list[str]:
    """The functions each choice called (tool calls, or the deprecated function_call)."""
    names = []
    for choice in _choices(body):
        message = choice["message"]
        names += [call["function"]["name"] for call in message.get("tool_calls") or ()]
        names += [message["function_call"]["name"]] if message.get("function_call") else []
    return names


def _chat_usage_counts_every_choice(body: dict[str, Any]) -> bool:
    return body["usage"]["completion_tokens"] == sum(len(text.split()) for text in _texts(body))


OBSERVED: dict[str, dict[str, Any]] = {
    COMPLETIONS: {
        "prompt": lambda body: len(_choices(body)) == 2,
        "n": lambda body: len(_choices(body)) == 3,
        "echo": lambda body: all(text.startswith("pa") for text in _texts(body)),
        "logprobs": lambda body: all(c["logprobs"] and c["logprobs"]["tokens"] for c in _choices(body)),
        "max_tokens": _words_and_finish(6, "length"),
        "stop": lambda body: _texts(body) == [" w0 w1"] and _choices(body)[0]["finish_reason"] == "stop",
    },
    CHAT: {
        "n": lambda body: len(_choices(body)) == 3 and _chat_usage_counts_every_choice(body),
        "max_tokens": _words_and_finish(6, "length"),
        "max_completion_tokens": _words_and_finish(6, "length"),
        "stop": lambda body: _texts(body) == [" w0 w1"] and _choices(body)[0]["finish_reason"] == "stop",
        "logprobs": lambda body: all(c["logprobs"]["content"] for c in _choices(body)),
        "top_logprobs": lambda body: all(len(token["top_logprobs"]) == 2 for c in _choices(body)
                                         for token in c["logprobs"]["content"]),
        "tools": lambda body: _called(body) != [],
        "tool_choice": lambda body: _called(body) == ["fetch"],
        "functions": lambda body: _called(body) != [],
        "function_call": lambda body: _called(body) == ["fetch"],
        "response_format": lambda body: all(isinstance(json.loads(text), dict) for text in _texts(body)),
    },
}
