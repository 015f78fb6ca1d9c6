"""Which OpenAI-compatible server a vendor is, and what the gateway then does with each parameter
(gateway/vendors/openai/servers.py): identified from the server's answer to GET /models as the
gateway starts, asked again in the background when it could not answer, and served as the most
limited server known until then."""

from __future__ import annotations

import asyncio
import json

import httpx
import pytest

from gateway.core.config import Settings, VendorConfig
from gateway.core.parameters import EMULATED, NATIVE, UNSUPPORTED
from gateway.planner.capabilities import verdicts
from gateway.vendors.openai import adapter as openai_adapter
from gateway.vendors.openai import servers
from gateway.vendors.openai.adapter import OpenAIAdapter, OpenAIOptions
from gateway.vendors.openai.completions import capabilities
from tests.support.environments import SHARED_TLS
from tests.support.fakes.server import ServerThread, free_port
from tests.support.gateway_process import GatewayProcess


def models(owned_by: str) -> dict:
    return {"object": "list", "data": [{"id": "m", "object": "model", "created": 0, "owned_by": owned_by}]}


@pytest.mark.parametrize(("header", "answer", "found"), [
    (None, models("llamacpp"), "llama.cpp"),
    ("llama.cpp", None, "llama.cpp"),  # its Server header, whatever the body
    ("uvicorn", models("vllm"), "vllm"),
    (None, models("sglang"), "sglang"),
    (None, models("library"), "ollama"),
    ("uvicorn", models("meta-llama/Llama-3-8B"), None),  # TGI names the model's owner: not identified
    (None, models("openai"), None),  # a claim to be OpenAI is not believed (LiteLLM's proxy makes it)
    (None, {"data": "not a list"}, None),
    (None, [1, 2], None),
    (None, None, None),
])  # fmt: skip
def test_a_server_is_identified_by_what_it_says_of_itself(header, answer, found):
    server = servers.identify(header, answer)
    assert (server.name if server else None) == found


def test_openai_itself_is_known_by_its_host_and_a_named_server_by_its_option():
    assert servers.declared("auto", ["https://api.openai.com/v1"]) is servers.OPENAI
    assert servers.declared("auto", ["https://api.openai.com/v1", "http://127.0.0.1:8000/v1"]) is None
    assert servers.declared("vllm", ["http://127.0.0.1:8000/v1"]) is servers.VLLM
    assert servers.agreed([servers.VLLM, servers.VLLM]) is servers.VLLM
    assert servers.agreed([servers.VLLM, None]) is None  # deployments that differ: the least of them


def test_what_each_server_lacks_is_emulated_or_refused_and_a_per_task_usage_fans_out():
    llama = verdicts(capabilities(OpenAIOptions(), servers.LLAMA_CPP))
    assert {name: llama[name].kind for name in ("echo", "best_of", "user", "suffix", "logprobs", "logit_bias")} == {
        "echo": EMULATED, "best_of": EMULATED, "user": EMULATED, "suffix": UNSUPPORTED, "logprobs": NATIVE,
        "logit_bias": NATIVE}
    assert llama["n"].per_call == 1 and llama["prompt"].per_call == 1  # its usage covers one task
    assert "llama.cpp's server does not implement it" in llama["suffix"].detail
    openai = verdicts(capabilities(OpenAIOptions(), servers.OPENAI))
    assert all(found.kind == NATIVE and found.per_call is None and found.range is None for found in openai.values())
    ollama = verdicts(capabilities(OpenAIOptions(), servers.OLLAMA))
    assert ollama["logprobs"].kind == UNSUPPORTED and ollama["best_of"].kind == UNSUPPORTED  # nothing to rank by
    # A vendor's own `lacks` adds to its server's.
    assert verdicts(capabilities(OpenAIOptions(lacks={"seed"}), servers.VLLM))["seed"].kind == UNSUPPORTED


def test_an_unidentified_server_is_assumed_to_lack_what_any_known_server_lacks():
    unknown = verdicts(capabilities(OpenAIOptions()))  # server "auto", not identified yet
    assert unknown == verdicts(capabilities(OpenAIOptions(), servers.UNIDENTIFIED))
    for server in servers.SERVERS.values():
        if server is servers.UNIDENTIFIED or server is servers.OPENAI:
            continue
        known = verdicts(capabilities(OpenAIOptions(), server))
        for name, found in known.items():
            if found.kind != NATIVE and name != "logprobs":  # logprobs are checked on every answer instead
                assert unknown[name].kind != NATIVE, (server.name, name)
            if found.per_call is not None:
                assert unknown[name].per_call == found.per_call
    assert "name the server in the vendor's `server` option" in unknown["suffix"].detail


def test_an_unknown_server_option_is_a_configuration_error():
    with pytest.raises(ValueError, match="names no known server"):
        OpenAIOptions(server="tgi")


class Models:
    """A server that answers GET /v1/models as `owned_by` would, and counts the times it was asked."""

    def __init__(self, owned_by: str) -> None:
        self.owned_by = owned_by
        self.asked = 0

    async def __call__(self, scope, receive, send) -> None:
        if scope["type"] != "http":
            return
        self.asked += 1
        body = json.dumps(models(self.owned_by)).encode()
        await send({"type": "http.response.start", "status": 200, "headers": [(b"content-type", b"application/json")]})
        await send({"type": "http.response.body", "body": body})


def test_a_server_down_as_the_gateway_starts_is_identified_once_it_answers(monkeypatch):
    monkeypatch.setattr(openai_adapter, "RETRY_IDENTIFY", 0.01)
    port = free_port()
    config = VendorConfig(name="later", protocol="openai", base_url=f"http://127.0.0.1:{port}/v1")
    fake = Models("vllm")

    async def run() -> None:
        adapter = OpenAIAdapter(config, OpenAIOptions(), Settings())
        await adapter.start()  # nothing listens yet
        assert adapter.server is servers.UNIDENTIFIED and adapter.capabilities["n"].per_call == 1
        with ServerThread(fake, port=port):
            assert await adapter.identified() is servers.VLLM  # the background task asked again
        assert adapter.capabilities["n"].per_call is None
        assert adapter.capabilities["echo"].kind == NATIVE
        await adapter.close()

    asyncio.run(asyncio.wait_for(run(), 30))
    assert fake.asked == 1


def test_the_gateway_shows_the_server_it_identified(database):
    fake = Models("llamacpp")
    with ServerThread(fake) as server:
        env = {"GATEWAY_DATABASE_URL": database.url, "GATEWAY_VENDOR_LOCAL_ENABLED": "0",
               "OPENAI_API_KEY": "sk-any", "OPENAI_BASE_URL": f"{server.url}/v1"}
        with GatewayProcess(env) as gateway:
            r = httpx.get(f"{gateway.url}/v5/vendors", headers={"x-api-key": database.key}, verify=SHARED_TLS)
    (vendor,) = r.json()["data"]
    assert (vendor["name"], vendor["server"]) == ("openai", "llama.cpp")
    assert vendor["parameters"]["n"]["per_call_limit"] == 1
    assert vendor["parameters"]["suffix"]["support"] == "unsupported"
    assert fake.asked == 1
