"""The inference endpoint's args guard (gateway/endpoints/inference/guard.py) and its protocols'
wires (wires.py): args that route are refused by name, the model is the gateway's, the stream flag
is read as each protocol takes it, and the body the vendor gets is args and the gateway's model."""

from __future__ import annotations

import copy

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gateway.core.errors import BadRequest
from gateway.endpoints.inference.guard import (
    ROUTING_NAMES,
    ROUTING_SUFFIXES,
    check_args,
    is_routing,
    prepare,
    wants_stream,
)
from gateway.endpoints.inference.wires import WIRES, http_wire, wire_of
from gateway.vendors.http_server.options import HttpServerOptions

TGI = HttpServerOptions(path="/generate", stream_path="/generate_stream", stream_flag="/stream",
                        checked_objects=frozenset({"/parameters"}))
LLAMA_SERVER = HttpServerOptions(path="/completion", stream_flag="/stream", model_field="model")
ALL = [*WIRES.values(), http_wire(TGI), http_wire(LLAMA_SERVER)]
MODEL = {"openai": "gpt-4o", "anthropic": "claude-x", "gemini": "gemini-2.5-flash", "local": "smollm2-135m",
         "http": "tgi-model"}  # fmt: skip


def refusal(wire, args, vendor="v"):
    with pytest.raises(BadRequest) as caught:
        check_args(wire, args, vendor=vendor, model=MODEL[wire.protocol])
    return caught.value


@pytest.mark.parametrize("wire", ALL, ids=lambda w: w.protocol + (w.http.path if w.http else ""))
@pytest.mark.parametrize("member", ["base_url", "baseUrl", "BASE-URL", "api_key", "apiKey", "x-api-key", "headers",
                                    "extra_headers", "url", "host", "port", "path", "deployment_id", "api_version",
                                    "authorization", "anthropic_api_key", "image_base_url", "proxy", "extra_body"])
def test_a_routing_member_at_the_top_of_args_is_refused_by_its_name_on_every_protocol(wire, member):
    error = refusal(wire, {member: "http://169.254.169.254/", "prompt": "hi"}, vendor="acme")
    assert (error.status, error.code, error.param, error.vendor) == (400, "routing_in_args", f"args.{member}", "acme")
    assert "http://169.254.169.254" not in error.message  # the value is never echoed


@pytest.mark.parametrize(("protocol", "args", "param"), [
    ("anthropic", {"max_tokens": 8, "metadata": {"user_id": "u", "api_key": "k"}}, "args.metadata.api_key"),
    ("gemini", {"generationConfig": {"baseUrl": "http://x"}}, "args.generationConfig.baseUrl"),
])
def test_routing_members_are_refused_in_the_objects_where_a_protocol_nests_its_options(protocol, args, param):
    assert refusal(WIRES[protocol], args).param == param


def test_an_http_vendor_checks_the_objects_its_operator_names():
    error = refusal(http_wire(TGI), {"inputs": "hi", "parameters": {"max_new_tokens": 4, "headers": {"a": "b"}}})
    assert error.param == "args.parameters.headers"
    check_args(http_wire(LLAMA_SERVER), {"prompt": "hi", "parameters": {"headers": 1}}, vendor="v", model="m")


@pytest.mark.parametrize("wire", ALL, ids=lambda w: w.protocol)
def test_the_vendors_payload_below_the_option_objects_is_not_routing(wire):
    """A tool may have a parameter named url, an image a url source: content, not routing."""
    image = {"type": "image", "source": {"type": "url", "url": "https://e"}}
    args = {"messages": [{"role": "user", "content": [image]}],
            "tools": [{"name": "fetch", "input_schema": {"type": "object", "properties": {"url": {"type": "string"}}}}],
            "contents": [{"parts": [{"fileData": {"fileUri": "gs://b/f"}}]}], "max_tokens": 8, "stream": False,
            "temperature": 0.5, "top_k": 3, "n_predict": 4, "stop": ["x"], "tool_choice": {"type": "auto"}}
    check_args(wire, args, vendor="v", model=MODEL[wire.protocol])


@pytest.mark.parametrize("protocol", ["openai", "anthropic"])
def test_where_the_body_carries_the_model_it_must_be_the_routed_one(protocol):
    wire, model = WIRES[protocol], MODEL[protocol]
    check_args(wire, {"model": model}, vendor="v", model=model)
    check_args(wire, {"model": f"v/{model}"}, vendor="v", model=model)
    error = refusal(wire, {"model": "claude-opus-expensive"})
    assert (error.code, error.param) == ("model_mismatch", "args.model")
    assert refusal(wire, {"model": {"name": model}}).param == "args.model"


@pytest.mark.parametrize("wire", [WIRES["gemini"], WIRES["local"], http_wire(TGI)], ids=lambda w: w.protocol)
def test_where_the_body_carries_no_model_args_model_is_refused(wire):
    error = refusal(wire, {"model": MODEL[wire.protocol]})
    assert (error.code, error.param) == ("model_mismatch", "args.model")


def test_an_http_vendor_with_a_model_field_takes_the_routed_model_there():
    wire = http_wire(LLAMA_SERVER)
    assert refusal(wire, {"model": "other"}).param == "args.model"
    assert prepare(wire, {"prompt": "hi"}, model="m", stream=False).body == {"prompt": "hi", "model": "m"}


def test_the_gateway_sets_the_model_and_leaves_args_as_it_was():
    args = {"model": "gpt-4o", "messages": [], "stream": True, "stream_options": {"include_usage": False}}
    before = copy.deepcopy(args)
    prepared = prepare(WIRES["openai"], args, model="gpt-4o-mini", stream=True)
    assert prepared.body["model"] == "gpt-4o-mini"
    assert prepared.body["stream_options"] == {"include_usage": True} and prepared.usage_asked_by_gateway
    assert args == before


def test_an_openai_stream_that_asks_for_its_usage_itself_keeps_the_usage_chunk():
    prepared = prepare(WIRES["openai"], {"stream": True, "stream_options": {"include_usage": True}}, model="m",
                       stream=True)
    assert not prepared.usage_asked_by_gateway
    assert prepare(WIRES["openai"], {"messages": []}, model="m", stream=False).body == {"messages": [], "model": "m"}


@pytest.mark.parametrize(("wire", "sent"), [(WIRES["gemini"], False), (http_wire(TGI), False), (WIRES["local"], True),
                                            (WIRES["anthropic"], True)], ids=lambda x: getattr(x, "protocol", str(x)))
def test_a_flag_that_picks_the_route_is_the_gateways_and_is_not_sent(wire, sent):
    args = {"stream": True, "x": 1}
    assert wants_stream(wire, args, vendor="v")
    assert ("stream" in prepare(wire, args, model=MODEL[wire.protocol], stream=True).body) is sent


@pytest.mark.parametrize("wire", ALL, ids=lambda w: w.protocol)
@pytest.mark.parametrize(("flag", "streams"), [(True, True), (False, False), (None, False)])
def test_the_stream_flag_is_true_false_or_absent(wire, flag, streams):
    assert wants_stream(wire, {"stream": flag}, vendor="v") is streams
    assert wants_stream(wire, {}, vendor="v") is False


@pytest.mark.parametrize("wire", ALL, ids=lambda w: w.protocol)
@pytest.mark.parametrize("flag", ["true", 1, {"on": True}])
def test_a_stream_flag_that_is_not_a_boolean_is_refused_naming_it(wire, flag):
    with pytest.raises(BadRequest) as caught:
        wants_stream(wire, {"stream": flag}, vendor="v")
    assert (caught.value.code, caught.value.param) == ("invalid_stream_flag", "args.stream")


def test_an_http_vendor_without_a_stream_flag_never_streams():
    wire = http_wire(HttpServerOptions(path="/v2/models/m/generate"))
    assert wants_stream(wire, {"stream": True}, vendor="v") is False


def test_wire_of_names_every_protocol_and_needs_an_http_vendors_options():
    assert wire_of("anthropic") is WIRES["anthropic"]
    assert wire_of("http", TGI).http is TGI
    with pytest.raises(ValueError):
        wire_of("http")


# Names a client might write: anything, and every routing name in the spellings clients use (a prefix
# before a name the suffix rule covers: `anthropic_api_key`).
_spellings = st.sampled_from(sorted(ROUTING_NAMES)).flatmap(lambda n: st.sampled_from(
    [n, n.upper(), f"x_{n}" if n.endswith(ROUTING_SUFFIXES) else n, f"{n[:2]}-{n[2:]}", n.title()]))


def test_the_query_of_a_search_or_rerank_server_is_not_routing():
    check_args(http_wire(LLAMA_SERVER), {"query": "q", "texts": ["a"]}, vendor="v", model="m")
_json = st.recursive(st.none() | st.booleans() | st.integers() | st.text(max_size=8),
                     lambda inner: st.lists(inner, max_size=3)
                     | st.dictionaries(st.text(max_size=8), inner, max_size=3),
                     max_leaves=10)


@settings(max_examples=300, deadline=None)
@given(args=st.dictionaries(st.text(max_size=12), _json, max_size=6), routing=_spellings, value=_json,
       wire=st.sampled_from(ALL))
def test_args_holding_a_routing_name_never_pass(args, routing, value, wire):
    args = {**args, routing: value}
    with pytest.raises(BadRequest) as caught:
        check_args(wire, args, vendor="v", model=MODEL[wire.protocol])
    assert caught.value.code in ("routing_in_args", "model_mismatch")


@settings(max_examples=300, deadline=None)
@given(args=st.dictionaries(st.text(max_size=12), _json, max_size=6), wire=st.sampled_from(ALL))
def test_the_guard_passes_or_refuses_with_a_400_and_a_passed_body_holds_no_routing_name(args, wire):
    try:
        check_args(wire, args, vendor="v", model=MODEL[wire.protocol])
        stream = wants_stream(wire, args, vendor="v")
    except BadRequest as refused:
        assert refused.status == 400 and refused.param
        return
    body = prepare(wire, args, model=MODEL[wire.protocol], stream=stream).body
    assert not [member for member in body if is_routing(member)]
