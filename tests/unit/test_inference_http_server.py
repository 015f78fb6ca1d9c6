"""The `http` protocol's pure parts (gateway/vendors/http_server/): JSON pointers, the options an
operator writes, the request they make, the answers read with them; and, end to end on loopback,
a request built from them against the fake TGI server (tests/support/fakes/tgi.py)."""

from __future__ import annotations

import json

import httpx
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import ValidationError

from gateway.core.errors import ConfigError
from gateway.core.vendor_config import VENDOR_FIELDS, VendorConfig, load_vendors
from gateway.endpoints.inference.answers import NativeStream, read_answer
from gateway.endpoints.inference.bounds import reserved_output
from gateway.endpoints.inference.guard import check_args, prepare, wants_stream
from gateway.endpoints.inference.usage import Counted
from gateway.endpoints.inference.wires import http_wire, wire_of
from gateway.vendors.http_server import pointer
from gateway.vendors.http_server.options import HttpServerOptions
from gateway.vendors.http_server.pointer import ABSENT, resolve
from gateway.vendors.http_server.wire import JsonLines, check_base_urls, count_at, error_at, headers, url
from gateway.vendors.transport.sse_reader import EventParser, MalformedStream
from gateway.vendors.untrusted import Malformed, Reported
from tests.support.fakes.server import ServerThread
from tests.support.fakes.tgi import FakeTGI

TGI = {"path": "/generate", "stream_path": "/generate_stream", "stream_flag": "/stream",
       "stream_end": "/generated_text", "completion_tokens": "/details/generated_tokens",
       "stream_prompt_tokens": "/details/input_length", "stream_completion_tokens": "/details/generated_tokens",
       "output_bound": "/parameters/max_new_tokens", "output_bound_default": 100,
       "checked_objects": ["/parameters"]}  # fmt: skip


@pytest.mark.parametrize(("where", "found"), [
    ("", {"a/b": {"m~n": [10, {"x": None}]}}), ("/a~1b", {"m~n": [10, {"x": None}]}), ("/a~1b/m~0n/0", 10),
    ("/a~1b/m~0n/1/x", None), ("/a~1b/m~0n/2", ABSENT), ("/a~1b/m~0n/01", ABSENT), ("/a~1b/m~0n/-", ABSENT),
    ("/a~1b/m~0n/0/deeper", ABSENT), ("/missing", ABSENT),
])
def test_a_pointer_names_a_value_or_absent_never_an_error(where, found):
    assert resolve(pointer.check(where), {"a/b": {"m~n": [10, {"x": None}]}}) == found


@pytest.mark.parametrize("bad", ["details", "/a~2", "/a~", "/" + "/".join("a" * 17), "/" + "a" * 300, "/a\nb"])
def test_a_malformed_pointer_is_refused_as_the_configuration_loads(bad):
    with pytest.raises(ValueError):
        pointer.check(bad)


def test_a_pointer_is_named_as_the_gateways_errors_name_fields():
    assert pointer.name("/parameters/max_new_tokens") == "args.parameters.max_new_tokens"
    assert pointer.name("/contents/0/parts") == "args.contents[0].parts"


@pytest.mark.parametrize(("option", "value"), [
    ("path", "generate"), ("path", "/../admin"), ("path", "/a/./b"), ("path", "//169.254.169.254/latest"),
    ("path", "/%2e%2e/admin"), ("path", "/a b"), ("path", "/a#frag"), ("path", "/a\\b"), ("path", "/a?b?c"),
    ("stream_path", "http://elsewhere/x"), ("key_header", "host"), ("key_header", "X-Forwarded-For"),
    ("key_header", "cookie"), ("key_header", "bad header"), ("key_header", "a\r\nb"), ("key_scheme", "Bearer x"),
    ("prompt_tokens", "details/x"), ("output_bound_default", -1), ("model_field", "a.b"),
    ("stream_format", "xml"), ("forward_headers", ["x-user"]),
])
def test_an_option_that_could_leave_the_base_url_or_smuggle_a_header_is_refused(option, value):
    with pytest.raises(ValidationError) as caught:
        HttpServerOptions.model_validate({"path": "/generate", option: value})
    assert option in str(caught.value)


def test_a_stream_path_needs_the_flag_that_asks_for_it():
    with pytest.raises(ValidationError):
        HttpServerOptions(path="/generate", stream_path="/generate_stream")


def test_the_options_load_from_the_environment_as_every_protocols_do():
    from gateway.core.vendor_config import Protocol

    env = {"GATEWAY_VENDOR_TGI_PROTOCOL": "http", "GATEWAY_VENDOR_TGI_BASE_URL": "http://10.0.0.5:8080",
           "GATEWAY_VENDOR_TGI_PATH": "/generate", "GATEWAY_VENDOR_TGI_STREAM_PATH": "/generate_stream",
           "GATEWAY_VENDOR_TGI_STREAM_FLAG": "/stream", "GATEWAY_VENDOR_TGI_CHECKED_OBJECTS": "/parameters,/x",
           "GATEWAY_VENDOR_TGI_OUTPUT_BOUND_DEFAULT": "100"}
    vendor = load_vendors({}, env, {"http": Protocol(frozenset(HttpServerOptions.model_fields))})["tgi"]
    options = HttpServerOptions.model_validate(dict(vendor.options))
    assert (options.stream_path, options.checked_objects, options.output_bound_default) == \
        ("/generate_stream", frozenset({"/parameters", "/x"}), 100)


def test_no_option_shadows_a_field_every_vendor_has():
    assert not set(HttpServerOptions.model_fields) & set(VENDOR_FIELDS)


@pytest.mark.parametrize("base_url", ["", "http://h:1/?x=1", "http://h:1/#top"])
def test_every_deployment_names_a_server_a_path_can_follow(base_url):
    with pytest.raises(ConfigError):
        check_base_urls(VendorConfig(name="tgi", protocol="http", base_url=base_url))
    check_base_urls(VendorConfig(name="tgi", protocol="http", base_url="http://h:1/tgi"))


def test_the_request_goes_under_the_base_url_with_the_gateways_key_and_nothing_else():
    options = HttpServerOptions.model_validate(TGI)
    assert url("http://h:8080/", options, stream=False) == "http://h:8080/generate"
    assert url("http://h:8080/tgi", options, stream=True) == "http://h:8080/tgi/generate_stream"
    assert headers(options, "sk-1", stream=True) == {"content-type": "application/json", "accept": "text/event-stream",
                                                     "authorization": "Bearer sk-1"}
    bare = HttpServerOptions(path="/x", key_header="X-Api-Key", key_scheme="", stream_format="json_lines")
    assert headers(bare, "k", stream=True) == {"content-type": "application/json", "accept": "application/x-ndjson",
                                               "x-api-key": "k"}
    assert "authorization" not in headers(options, "", stream=False)  # a server without a key gets none


def test_counts_flags_and_errors_are_read_at_their_pointers():
    answer = {"details": {"generated_tokens": 4, "seed": None}, "error": None}
    assert count_at("/details/generated_tokens", answer) == 4
    assert count_at("/details/seed", answer) is None and count_at("/nothing", answer) is None
    assert count_at(None, answer) is None
    with pytest.raises(Malformed) as caught:
        count_at("/details/generated_tokens", {"details": {"generated_tokens": "4 tokens"}})
    assert "/details/generated_tokens" in str(caught.value) and "4 tokens" not in str(caught.value)
    assert error_at("/error", answer) is None
    assert error_at("/error", {"error": "boom", "error_type": "generation"}) == "boom"
    assert error_at("/error", {"error": {"message": "m"}}) == "m"


def test_json_lines_are_split_across_reads_and_bounded():
    lines = JsonLines(limit=64)
    assert lines.feed(b'{"a": 1}\n{"b"') == ['{"a": 1}']
    assert lines.feed(b': 2}\r\n\n') == ['{"b": 2}']
    assert lines.feed(b'{"c": 3}') == [] and lines.close() == ['{"c": 3}']
    with pytest.raises(MalformedStream):
        JsonLines(limit=8).feed(b"x" * 9)
    with pytest.raises(MalformedStream):
        JsonLines().feed(b"\xff\n")


@settings(max_examples=300, deadline=None)
@given(st.text(max_size=40))
def test_a_path_that_passes_stays_under_its_base_url(path):
    try:
        options = HttpServerOptions(path=path)
    except ValidationError:
        return
    built = httpx.URL(url("http://upstream.internal:9000/base", options, stream=False))
    assert (built.scheme, built.host, built.port) == ("http", "upstream.internal", 9000)
    assert built.path.startswith("/base/") and "/../" not in built.path + "/"


@pytest.fixture(scope="module")
def tgi():
    fake = FakeTGI(token="tgi-secret")
    with ServerThread(fake) as server:
        fake.url = server.url
        yield fake


def call(tgi, options, args, *, key="tgi-secret"):
    wire = http_wire(options)
    check_args(wire, args, vendor="tgi", model="m")
    stream = wants_stream(wire, args, vendor="tgi")
    prepared = prepare(wire, args, model="m", stream=stream)
    return stream, httpx.post(url(tgi.url, options, stream), headers=headers(options, key, stream),
                              content=json.dumps(prepared.body), timeout=10)


def test_a_plain_tgi_answer_is_read_and_billed_from_its_details(tgi):
    options = HttpServerOptions.model_validate(TGI)
    args = {"inputs": "one two three", "parameters": {"max_new_tokens": 3, "details": True}}
    assert reserved_output(http_wire(options), args, vendor="tgi").tokens == 3
    stream, answer = call(tgi, options, args)
    assert not stream and answer.status_code == 200, answer.text
    wrapped, counted = read_answer(http_wire(options), answer.content)
    assert wrapped["response"]["generated_text"] == " w0 w1 w2"
    assert counted == Counted(None, 3)  # TGI's plain answer has no prompt count: the gateway counts it
    assert tgi.requests[-1]["body"] == args and tgi.requests[-1]["path"] == "/generate"


def test_a_tgi_stream_is_asked_at_its_path_read_to_its_end_and_billed(tgi):
    options = HttpServerOptions.model_validate(TGI)
    args = {"inputs": "one two", "parameters": {"max_new_tokens": 2, "details": True}, "stream": True}
    stream, answer = call(tgi, options, args)
    assert stream and answer.headers["content-type"].startswith("text/event-stream")
    reading = NativeStream(http_wire(options))
    chunks = [reading.take(event.data) for event in EventParser().feed(answer.content)]
    assert [c["response"]["token"]["text"] for c in chunks] == [" w0", " w1"]
    assert reading.finish() == Counted(2, 2)
    assert tgi.requests[-1]["path"] == "/generate_stream" and "stream" not in tgi.requests[-1]["body"]


@pytest.mark.parametrize(("inputs", "failure"), [("stream-error now", Reported), ("cut-stream now", Malformed),
                                                 ("huge-count now", Malformed)])
def test_a_tgi_stream_that_fails_is_told_from_one_that_ended(tgi, inputs, failure):
    options = HttpServerOptions.model_validate(TGI)
    _, answer = call(tgi, options, {"inputs": inputs, "parameters": {"max_new_tokens": 2, "details": True},
                                    "stream": True})
    reading = NativeStream(http_wire(options))
    with pytest.raises(failure):
        for event in EventParser().feed(answer.content):
            reading.take(event.data)
        reading.finish()


def test_the_fake_refuses_what_tgi_does_not_take_and_a_wrong_key(tgi):
    options = HttpServerOptions.model_validate(TGI)
    _, answer = call(tgi, options, {"inputs": "x", "parameters": {"max_new_tokens": 2, "n": 2}})
    assert answer.status_code == 422 and answer.json()["error_type"] == "validation"
    assert "unknown field `n`" in answer.json()["error"]
    _, answer = call(tgi, options, {"inputs": "x", "parameters": {"temperature": 0}})
    assert answer.status_code == 422 and "strictly positive" in answer.json()["error"]
    _, answer = call(tgi, options, {"inputs": "x"}, key="not-the-key")
    assert answer.status_code == 401


LLAMA_CPP = {"path": "/completion", "stream_flag": "/stream", "prompt_tokens": "/tokens_evaluated",
             "completion_tokens": "/tokens_predicted", "stream_prompt_tokens": "/tokens_evaluated",
             "stream_completion_tokens": "/tokens_predicted", "output_bound": "/n_predict",
             "completion_text": "/content", "stream_completion_text": "/content"}  # fmt: skip


@pytest.mark.parametrize("stream", [False, True])
def test_llama_cpps_own_server_is_read_and_billed_from_its_own_counts(engine, stream):
    """docs/inference.md's llama.cpp configuration, against llama.cpp's own server (xllamacpp, in
    this process): its /completion answer and stream are what the pointers and the `local` wire say."""
    options = HttpServerOptions.model_validate(LLAMA_CPP)
    wire = http_wire(options)
    args = {"prompt": "The capital of France is", "n_predict": 4, "temperature": 0, "stream": stream}
    check_args(wire, args, vendor="llamacpp", model="m")
    body = prepare(wire, args, model="m", stream=wants_stream(wire, args, vendor="llamacpp")).body
    answer = httpx.post(url(engine.url, options, stream), headers=headers(options, "", stream),
                        content=json.dumps(body), timeout=120)
    assert answer.status_code == 200, answer.text
    prompt = len(engine.tokenize("The capital of France is"))
    if not stream:
        assert read_answer(wire, answer.content)[1] == Counted(prompt, 4)
        return
    events = EventParser().feed(answer.content)
    reading, local = NativeStream(wire), NativeStream(wire_of("local"))
    for event in events:
        reading.take(event.data)
        local.take(event.data)
    assert reading.finish() == Counted(prompt, 4)
    assert (local.finish().prompt_tokens, local.finish().completion_tokens) == (prompt, 4)
