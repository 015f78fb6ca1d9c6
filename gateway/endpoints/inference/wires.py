"""What each vendor protocol's native API is, as data the inference rules read.

A fixed protocol's wire is a constant here (`WIRES`); the `http` protocol's comes from the vendor's
options (`http_wire`), since only the operator knows the server. Pointers are RFC 6901 into the
client's `args` (vendors/http_server/pointer.py).
"""

from __future__ import annotations

from dataclasses import dataclass

from gateway.vendors.http_server.options import HttpServerOptions


@dataclass(frozen=True, slots=True)
class NativeWire:
    protocol: str
    endpoint: str  # the native endpoint, for messages and docs
    # The top-level member that names the model, which the gateway sets to the routed one; None
    # where the protocol carries the model elsewhere (Gemini: the path) or serves one (the
    # embedded model): there `args.model` is refused.
    model_field: str | None
    # The member of args whose `true` asks for a stream (None: the protocol is never streamed) and
    # whether it is sent: a protocol that streams at another route (Gemini's
    # streamGenerateContent, TGI's /generate_stream) takes the flag as the gateway's to read.
    stream_flag: str | None
    stream_flag_sent: bool
    # The members of args that bound the output tokens (the first is the one to set; when several
    # are given the largest is reserved), the protocol's default when none is (None: unbounded),
    # values that mean "unbounded" (llama.cpp's n_predict -1), and the member that multiplies it
    # (choices per request).
    output_bounds: tuple[str, ...]
    output_bound_default: int | None = None
    unbounded: frozenset[int] = frozenset()
    choices: str | None = None
    # Objects of args holding request options, checked for routing names: "" is args itself.
    checked_objects: tuple[str, ...] = ("",)
    http: HttpServerOptions | None = None  # the http protocol's options


# The embedded model and llama.cpp's server take the same /completion body.
_LLAMA_CPP = dict(model_field=None, stream_flag="/stream", stream_flag_sent=True, output_bounds=("/n_predict",),
                  unbounded=frozenset({-1}))

WIRES: dict[str, NativeWire] = {
    # max_tokens: OpenAI's older name for the bound, still taken (and by most compatible servers).
    "openai": NativeWire("openai", "chat completions (POST {base_url}/chat/completions)", model_field="model",
                         stream_flag="/stream", stream_flag_sent=True,
                         output_bounds=("/max_completion_tokens", "/max_tokens"), choices="/n"),
    "anthropic": NativeWire("anthropic", "the Messages API (POST /v1/messages)", model_field="model",
                            stream_flag="/stream", stream_flag_sent=True, output_bounds=("/max_tokens",),
                            checked_objects=("", "/metadata")),
    "gemini": NativeWire("gemini", "models/{model}:generateContent (:streamGenerateContent?alt=sse)",
                         model_field=None, stream_flag="/stream", stream_flag_sent=False,
                         output_bounds=("/generationConfig/maxOutputTokens",),
                         choices="/generationConfig/candidateCount", checked_objects=("", "/generationConfig")),
    "local": NativeWire("local", "llama.cpp's /completion, in process", **_LLAMA_CPP),  # type: ignore[arg-type]
}


def http_wire(options: HttpServerOptions) -> NativeWire:
    """An `http` vendor's wire, from what its operator configured."""
    return NativeWire(
        "http", f"POST {{base_url}}{options.path}", model_field=options.model_field,
        stream_flag=options.stream_flag, stream_flag_sent=options.stream_path is None,
        output_bounds=(options.output_bound,) if options.output_bound else (),
        output_bound_default=options.output_bound_default,
        checked_objects=("", *sorted(options.checked_objects)), http=options)


def wire_of(protocol: str, http: HttpServerOptions | None = None) -> NativeWire:
    """The wire of a vendor of `protocol` (an `http` vendor's needs its options). KeyError for a
    protocol that serves no native inference."""
    if protocol == "http":
        if http is None:
            raise ValueError("an http vendor's wire comes from its options")
        return http_wire(http)
    return WIRES[protocol]
