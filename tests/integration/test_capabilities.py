"""The capability map never lies: for every configured vendor and every parameter, parametrized over
the same data the gateway enforces, a request using it is served (native: the vendor receives it)
or rejected with a 400 naming parameter and vendor; GET /v5/vendors and docs/capabilities.md say
exactly that."""

from __future__ import annotations

import httpx
import pytest

from gateway.core.responses import BRIDGED, REFUSED, SERVED_HERE
from gateway.core.parameters import CHAT_PARAMETERS, NATIVE, UNSUPPORTED
from gateway.planner import capability_table
from gateway.planner.capabilities import served_below, verdicts
from handlers.vendors import describe
from tests.support.bodies import contains, streamed
from tests.support.environments import SHARED_TLS, VENDORS, capabilities_of
from tests.support.parameter_examples import CHAT, COMPLETIONS, example, missing

CASES = [(vendor, name, found) for vendor in VENDORS for name, found in verdicts(capabilities_of(vendor)).items()]
RANGES = [(vendor, name, found.range) for vendor, name, found in CASES if found.range is not None]
BELOW = [(vendor, name, value) for vendor, name, found in CASES if (value := served_below(name, found)) is not None]


@pytest.mark.parametrize("endpoint", [COMPLETIONS, CHAT])
def test_every_parameter_of_the_contract_has_an_example_value(endpoint):
    """A field added to openapi.json needs its example (the failure says where to add it)."""
    assert missing(endpoint) == [], f"add example values to tests/support/parameter_examples.py for {missing(endpoint)}"


def requests_of(fakes) -> list[dict]:
    return [req for fake in fakes for req in fake.requests]


@pytest.mark.parametrize(("vendor", "name", "found"), CASES, ids=[f"{v}-{n}" for v, n, _ in CASES])
def test_every_parameter_is_served_or_rejected_naming_it(vclient, upstream, anthropic_upstream, gemini_upstream,
                                                         vendor, name, found):
    fakes = (upstream, anthropic_upstream, gemini_upstream)
    body = {"model": f"{vendor}/m", "prompt": "x", "max_tokens": 5, name: example(COMPLETIONS, name)}
    r = vclient.post("/v5/completions", json=body)
    if found.kind == UNSUPPORTED:
        assert r.status_code == 400, r.text
        error = r.json()["error"]
        assert (error["code"], error["param"], error["vendor"]) == ("unsupported_parameter", name, vendor)
        assert found.detail in error["message"]
        assert requests_of(fakes) == []  # rejected before any vendor call
        return
    assert r.status_code == 200, r.text
    if found.kind == NATIVE:
        value = example(COMPLETIONS, name)
        sent = [req["body"] for req in requests_of(fakes)]
        assert any(contains(b, value) or contains(b, [value]) for b in sent), (name, sent)


@pytest.mark.parametrize(("vendor", "name", "allowed"), RANGES, ids=[f"{v}-{n}" for v, n, _ in RANGES])
def test_values_outside_a_vendors_range_are_rejected_not_clamped(vclient, upstream, anthropic_upstream,
                                                                  gemini_upstream, vendor, name, allowed):
    step = 1 if isinstance(allowed.maximum, int) else 0.5
    for value in (allowed.maximum + step, allowed.minimum - step):
        if (vendor, name, value) in BELOW:
            continue  # served (the next test)
        r = vclient.post("/v5/completions", json={"model": f"{vendor}/m", "prompt": "x", name: value})
        if r.status_code == 422:
            continue  # outside the contract's own range too
        assert r.status_code == 400, r.text
        error = r.json()["error"]
        assert (error["code"], error["param"], error["vendor"]) == ("parameter_out_of_range", name, vendor)
        assert str(allowed) in error["message"]
    assert requests_of((upstream, anthropic_upstream, gemini_upstream)) == []
    r = vclient.post("/v5/completions", json={"model": f"{vendor}/m", "prompt": "x", name: allowed.maximum,
                                              "max_tokens": 1})
    assert r.status_code == 200, r.text


@pytest.mark.parametrize(("vendor", "name", "value"), BELOW, ids=[f"{v}-{n}" for v, n, _ in BELOW])
def test_a_value_below_a_vendors_range_that_the_gateway_serves(vclient, upstream, anthropic_upstream,
                                                               gemini_upstream, vendor, name, value):
    assert (name, value) == ("max_tokens", 0)  # the one there is: the vendor is asked for 1 token, dropped
    fakes = (upstream, anthropic_upstream, gemini_upstream)
    for stream in (False, True):
        usage_chunk = {"stream": True, "stream_options": {"include_usage": True}} if stream else {}
        r = vclient.post("/v5/completions", json={"model": f"{vendor}/m", "prompt": "x", name: value, **usage_chunk})
        assert r.status_code == 200, r.text
        if stream:
            texts, finishes, chunks = streamed(r.text)
            usage = chunks[-1]["usage"]
        else:
            texts = {c["index"]: c["text"] for c in r.json()["choices"]}
            finishes = {c["index"]: [c["finish_reason"]] for c in r.json()["choices"]}
            usage = r.json()["usage"]
        assert texts == {0: ""} and finishes == {0: ["length"]}, r.text
        assert usage["completion_tokens"] == 1  # what the vendor generated, and bills
    sent = requests_of(fakes)
    assert len(sent) == 2 and all(contains(req["body"], 1) for req in sent)


def test_anthropic_temperature_above_one(vclient):
    r = vclient.post("/v5/completions", json={"model": "anthropic/m", "prompt": "x", "temperature": 1.5})
    assert r.status_code == 400
    assert r.json()["error"]["message"] == (
        "parameter 'temperature' = 1.5 is out of range for vendor 'anthropic', which accepts [0, 1]")


def test_fan_out_is_bounded(vclient, anthropic_upstream):
    r = vclient.post("/v5/completions", json={"model": "anthropic/m", "prompt": ["p"] * 100, "n": 3})
    assert r.status_code == 400
    error = r.json()["error"]
    assert (error["code"], error["param"], error["vendor"]) == ("too_many_vendor_calls", "prompt", "anthropic")
    assert "300 vendor calls" in error["message"] and anthropic_upstream.requests == []


def test_vendors_operation_shows_the_enforced_map(vclient):
    r = vclient.get("/v5/vendors")
    assert r.status_code == 200, r.text
    listed = {vendor["name"]: vendor for vendor in r.json()["data"]}
    assert r.json()["object"] == "list" and [v["name"] for v in r.json()["data"]] == sorted(listed)
    assert listed["anthropic"]["responses_parameters"]["temperature"] == {"support": "native", "minimum": 0,
                                                                          "maximum": 1}  # chat's, as bridged
    # OpenAI's own server is sent a Responses request (its own API); a compatible one is bridged.
    assert listed["bare"]["responses_parameters"]["include"]["support"] == "native"
    assert listed["compat"]["responses_parameters"]["include"]["support"] == "unsupported"
    for name, (protocol, _, options) in VENDORS.items():
        vendor = listed[name]
        assert vendor.pop("routing") == "least_outstanding" and len(vendor.pop("deployments")) == 1
        assert vendor.pop("server", None) == options.get("server")  # as configured
        assert set(vendor.pop("chat_parameters")) == set(CHAT_PARAMETERS)
        assert set(vendor.pop("responses_parameters")) == {*BRIDGED, *SERVED_HERE, *REFUSED}
        assert vendor == describe(name, protocol, capabilities_of(name))
    assert listed["anthropic"]["parameters"]["temperature"] == {"support": "native", "minimum": 0, "maximum": 1}
    assert listed["gemini"]["parameters"]["n"]["per_call_limit"] == 4


def test_vendors_operation_needs_a_key(vendors_gateway):
    assert httpx.get(f"{vendors_gateway.url}/v5/vendors", verify=SHARED_TLS).status_code == 401


def test_capability_table_is_generated_from_the_map():
    assert capability_table.DEFAULT_PATH.read_text() == capability_table.render(), "run `make docs`"
