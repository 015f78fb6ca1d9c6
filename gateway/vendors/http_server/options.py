"""The `http` protocol's configuration: what the operator tells the gateway about a model server.

Written like every protocol's options (`[vendors.<name>]` keys, or GATEWAY_VENDOR_<NAME>_<OPTION>
variables, gateway/core/vendor_config.py); the vendor's `base_url`, key, deployments, timeouts and
retries are the common fields every vendor has. A TGI server:

    [vendors.tgi]
    protocol = "http"
    base_url = "http://10.0.0.5:8080"
    api_key_env = "TGI_TOKEN"
    path = "/generate"
    stream_path = "/generate_stream"
    stream_flag = "/stream"
    stream_end = "/generated_text"
    completion_tokens = "/details/generated_tokens"
    stream_prompt_tokens = "/details/input_length"
    stream_completion_tokens = "/details/generated_tokens"
    completion_text = "/generated_text"
    stream_completion_text = "/token/text"
    output_bound = "/parameters/max_new_tokens"
    output_bound_default = 100
    checked_objects = ["/parameters"]

Everything is checked as it loads, so a request never meets a bad option: paths that stay under
the base URL, pointers that are pointers (RFC 6901), a key header that can carry nothing but the
key. There is no option to forward a client's header: the server gets the gateway's key, and the
client's `args`, nothing else.
"""

from __future__ import annotations

import re
from typing import Annotated, Literal

from pydantic import AfterValidator, BaseModel, BeforeValidator, ConfigDict, NonNegativeInt, model_validator

from gateway.core.completion import MAX_USAGE_TOKENS
from gateway.core.vendor_config import split_names
from gateway.vendors.http_server.pointer import JsonPointer
from gateway.vendors.server_paths import ServerPath

# An HTTP field name and an auth scheme: RFC 9110 tokens.
_TOKEN = re.compile(r"[!#$%&'*+.^_`|~0-9A-Za-z-]{1,64}")
# Headers the key may not ride in: the message's framing and routing (a key there would break or
# redirect the request), what proxies add about the client (a server may trust them), and cookies.
FORBIDDEN_HEADERS = frozenset({
    "host", "content-length", "content-type", "content-encoding", "transfer-encoding", "connection",
    "keep-alive", "upgrade", "te", "trailer", "expect", "accept", "accept-encoding", "cookie", "set-cookie",
    "forwarded", "via", "x-real-ip", "x-request-id", "user-agent", "origin", "referer",
})  # fmt: skip
_FORBIDDEN_PREFIXES = ("x-forwarded-", "proxy-", "sec-", ":")


def header_name(name: str) -> str:
    name = name.strip().lower()
    if not _TOKEN.fullmatch(name):
        raise ValueError("a header name is an HTTP token (letters, digits and !#$%&'*+.^_`|~-)")
    if name in FORBIDDEN_HEADERS or name.startswith(_FORBIDDEN_PREFIXES):
        raise ValueError(f"the key cannot ride in {name!r}: it frames, routes or describes the request")
    return name


def auth_scheme(scheme: str) -> str:
    scheme = scheme.strip()
    if scheme and not _TOKEN.fullmatch(scheme):
        raise ValueError("an auth scheme is an HTTP token (e.g. Bearer), or empty for the bare key")
    return scheme


Pointers = Annotated[frozenset[JsonPointer], BeforeValidator(split_names)]


class HttpServerOptions(BaseModel):
    """A model server's API, as the `http` protocol needs it (module docstring: a TGI example)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    path: ServerPath  # where a request goes, under the vendor's base_url (e.g. /generate)
    # Where a streamed request goes instead (TGI's /generate_stream); the flag is then not sent.
    stream_path: ServerPath | None = None
    # The member of `args` whose `true` asks for a stream (e.g. /stream). Without it, never streamed.
    stream_flag: JsonPointer | None = None
    stream_format: Literal["sse", "json_lines"] = "sse"
    # The member of a stream event, present and not null or false, that marks the server's last
    # event (TGI: /generated_text). Without it, the end of the body ends the stream.
    stream_end: JsonPointer | None = None
    key_header: Annotated[str, AfterValidator(header_name)] = "authorization"
    key_scheme: Annotated[str, AfterValidator(auth_scheme)] = "Bearer"  # "" sends the bare key
    # Where a plain answer reports its tokens, and where a stream's events do (the last value wins).
    prompt_tokens: JsonPointer | None = None
    completion_tokens: JsonPointer | None = None
    stream_prompt_tokens: JsonPointer | None = None
    stream_completion_tokens: JsonPointer | None = None
    # Where an answer's generated text is, and each stream event's piece of it: what the gateway
    # counts when the server reports no completion tokens (default: every string in the answer).
    completion_text: JsonPointer | None = None
    stream_completion_text: JsonPointer | None = None
    # The member of `args` that bounds the output (what a token budget reserves), and the server's
    # own default when `args` gives none (TGI: 100; none when the server's default is unbounded).
    output_bound: JsonPointer | None = None
    output_bound_default: Annotated[NonNegativeInt, AfterValidator(lambda n: _at_most(n))] | None = None
    # Where an error answer or event says what went wrong (TGI: {"error": "...", "error_type"}).
    error: JsonPointer = "/error"
    # Objects nested in `args` that hold request options, checked for routing names like the top
    # level (TGI: /parameters).
    checked_objects: Pointers = frozenset()
    # The top-level member of `args` that names the model, when the server takes one: the gateway
    # sets it to the routed model. Without it, `args.model` is refused.
    model_field: Annotated[str, AfterValidator(lambda n: _member(n))] | None = None

    @model_validator(mode="after")
    def _coherent(self) -> HttpServerOptions:
        if self.stream_path is not None and self.stream_flag is None:
            raise ValueError("stream_path needs stream_flag: the member of args that asks for a stream")
        if self.stream_flag == "":
            raise ValueError("stream_flag names a member of args, not args itself")
        if self.output_bound == "":
            raise ValueError("output_bound names a member of args, not args itself")
        return self


def _at_most(n: int) -> int:
    if n > MAX_USAGE_TOKENS:
        raise ValueError(f"at most {MAX_USAGE_TOKENS}")
    return n


def _member(name: str) -> str:
    if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]{0,63}", name):
        raise ValueError("a member name: a letter or '_', then letters, digits or '_'")
    return name
