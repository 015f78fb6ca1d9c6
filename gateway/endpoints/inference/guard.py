"""The gateway owns the routing: what `args` may not say, and the body the vendor gets.

`args` is the vendor's own request body, passed through. It may not say where or how the request
is sent, nor with whose credentials: a member named like a URL, path, host, header, key or
deployment is refused by name (a 400, `routing_in_args`), whatever its value. Peers' pass-through
endpoints honour such members (LiteLLM's `api_base` and `api_key` in the body), which turns a key
for one vendor into a proxy to any address with any credentials. The names are checked at the top
level of `args` and in the objects where the protocol nests request options
(`NativeWire.checked_objects`: Anthropic's `metadata`, Gemini's `generationConfig`, an http
vendor's configured ones such as TGI's `parameters`). Deeper content (messages, tools, schemas) is
the vendor's payload, not routing: a tool may well have a parameter named `url`.

Names are compared without case, `_`, `-` or `.`, so `baseUrl`, `base-url` and `BASE_URL` are one
name. Where the protocol carries the model in the body, an `args.model` other than the routed one
is a 400 naming it (`model_mismatch`) and the gateway sets it; elsewhere `args.model` is refused.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from gateway.core.errors import BadRequest, clip
from gateway.endpoints.inference.wires import NativeWire
from gateway.vendors.http_server.pointer import ABSENT, name, resolve, tokens

# Members that say where a request goes or with what credentials, normalised (see `normalised`).
ROUTING_NAMES = frozenset({
    # addresses
    "url", "uri", "baseurl", "apibase", "apiurl", "endpoint", "endpoints", "host", "hostname", "port", "path",
    "proxy", "proxies", "socket", "unixsocket",
    # headers and query strings sent besides the body
    "headers", "header", "extraheaders", "defaultheaders", "extraquery", "extrabody", "queryparams",
    "cookie", "cookies",
    # credentials
    "apikey", "apikeys", "key", "xapikey", "authorization", "auth", "accesstoken", "authtoken", "bearertoken",
    "apitoken", "credentials", "secret", "password", "token",
    # another deployment, account or vendor
    "deployment", "deploymentid", "deploymentname", "deployments", "apiversion", "organization", "organisation",
    "project", "projectid", "region", "location", "provider", "vendor", "account", "accountid", "tenant",
})  # fmt: skip
# Any name ending so is one of the above in another spelling (`anthropic_api_key`, `image_base_url`).
ROUTING_SUFFIXES = ("url", "uri", "apikey", "headers", "secret", "password", "credentials")


def normalised(member: str) -> str:
    return member.lower().replace("_", "").replace("-", "").replace(".", "")


def is_routing(member: str) -> bool:
    """Whether a member of args names where or how a request is sent (module docstring)."""
    plain = normalised(member)
    return plain in ROUTING_NAMES or plain.endswith(ROUTING_SUFFIXES)


def check_args(wire: NativeWire, args: dict[str, Any], *, vendor: str, model: str) -> None:
    """Refuse `args` that routes (a 400 naming the member) or names another model. `model` is the
    routed model as the vendor names it (what follows `vendor/`)."""
    for where in wire.checked_objects:
        options = resolve(where, args)
        if not isinstance(options, dict):
            continue  # absent, or not an object: the vendor's to refuse
        for member in options:
            if is_routing(member):
                param = name(f"{where}/{_escape(member)}")
                raise BadRequest(
                    f"`{clip(param)}` names where or how the request is sent (a URL, path, host, header, key or "
                    f"deployment): the gateway routes it by `model` and sends it with its own key to vendor "
                    f"'{vendor}'", code="routing_in_args", param=clip(param), vendor=vendor)
    for member in ("model", wire.model_field):
        if member is None or member not in args:
            continue
        given = args[member]
        if member != wire.model_field:
            raise BadRequest(f"vendor '{vendor}' ({wire.protocol}) takes its model from the request's `model`, "
                             f"not from `args.{member}`: leave it out", code="model_mismatch",
                             param=f"args.{member}", vendor=vendor)
        if given not in (model, f"{vendor}/{model}"):
            raise BadRequest(f"`args.{member}` names another model than the request's `model` "
                             f"({vendor}/{clip(model)}): leave it out, the gateway sets it",
                             code="model_mismatch", param=f"args.{member}", vendor=vendor)


@dataclass(frozen=True, slots=True)
class Prepared:
    """The body the vendor gets, whether it streams, and whether the gateway asked for usage the
    client did not (then the usage-only last chunk is the gateway's, not passed on)."""

    body: dict[str, Any]
    stream: bool
    usage_asked_by_gateway: bool = False


def prepare(wire: NativeWire, args: dict[str, Any], *, model: str, stream: bool) -> Prepared:
    """The vendor's body: `args` (checked by `check_args`) with the model the gateway routes to,
    without a stream flag the gateway reads but the vendor does not take, and for an OpenAI stream
    asking for its usage (`stream_options.include_usage`), which is what the request is billed from.
    `args` itself is left as it was (it may be tried again on a fallback)."""
    body = dict(args)
    if wire.model_field is not None:
        body[wire.model_field] = model
    if wire.stream_flag is not None and not wire.stream_flag_sent:
        body = _without(body, tokens(wire.stream_flag))
    asked = False
    if wire.protocol == "openai" and stream:
        options = body.get("stream_options")
        options = dict(options) if isinstance(options, dict) else {}
        if options.get("include_usage") is not True:
            body["stream_options"] = options | {"include_usage": True}
            asked = True
    return Prepared(body, stream, asked)


def wants_stream(wire: NativeWire, args: dict[str, Any], *, vendor: str) -> bool:
    """Whether `args` asks for a stream with the protocol's own flag: `true` streams, absent, null
    or `false` does not, anything else is a 400 naming the flag (the gateway must know which answer
    to read, and a vendor may read "yes" as true)."""
    if wire.stream_flag is None:
        return False
    flag = resolve(wire.stream_flag, args)
    if flag is ABSENT or flag is None:
        return False
    if not isinstance(flag, bool):
        param = name(wire.stream_flag)
        raise BadRequest(f"`{param}` asks vendor '{vendor}' for a stream with true, or for none with false",
                         code="invalid_stream_flag", param=param, vendor=vendor)
    return flag


def _escape(member: str) -> str:
    return member.replace("~", "~0").replace("/", "~1")


def _without(document: dict[str, Any], path: tuple[str, ...]) -> dict[str, Any]:
    """`document` without the member at `path`, copying only the objects on the way."""
    if not path:
        return document
    head, rest = path[0], path[1:]
    if head not in document:
        return document
    out = dict(document)
    if not rest:
        del out[head]
    elif isinstance(out[head], dict):
        out[head] = _without(out[head], rest)
    return out



# Members that name what the vendor keeps for an account (a cache, a container, a stored
# response or conversation) or makes it call out (MCP servers, with their URLs and tokens). Under
# the gateway's one vendor key every client shares that account: one client's stored object would
# be another's to read. Refused by name, whatever their value (lead's decision, issue 42).
SHARED_STATE = {
    "gemini": ("cachedContent",),
    "anthropic": ("container", "mcp_servers"),
}
# On an OpenAI-protocol vendor whose `inference_path` is a Responses API.
RESPONSES_STATE = ("previous_response_id", "conversation")


def check_shared_state(protocol: str, args: dict[str, Any], *, vendor: str, responses_api: bool = False) -> None:
    """Refuse `args` that reference objects stored at the vendor under the gateway's shared key (a
    400 naming the member, `shared_vendor_state`)."""
    names = SHARED_STATE.get(protocol, ()) + (RESPONSES_STATE if responses_api else ())
    for member in names:
        if member in args:
            raise BadRequest(f"`args.{member}` names what vendor '{vendor}' keeps for the gateway's own account, "
                             f"which every client of the gateway shares: leave it out", code="shared_vendor_state",
                             param=f"args.{member}", vendor=vendor)
