"""How the configuration and a request name models: `vendor/name`, or an alias.

An alias (`[aliases]` `"gpt-4o" = "openai/gpt-4o"`, or GATEWAY_ALIASES="gpt-4o=openai/gpt-4o;...")
lets a client hard-wired to a bare name call the gateway. It is resolved once, as the request
arrives (`resolved`): from there on the request is the real `vendor/name`'s, so its allow-list,
limits, cache entry, fallbacks, answer and ledger row are that model's. A bare name that is no
alias is the client's mistake, a 422 that says in words how a model is named.

The fallback chains (`[fallbacks]`, GATEWAY_FALLBACKS) name models too, and are read here beside them.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any

from gateway.core.errors import ConfigError, ValidationFailed, clip, invalid_field

# An alias: what a client writes in place of `vendor/name`. No `/`, so it never shadows a model of a
# vendor; at most the contract's length of `model`.
ALIAS_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.:-]{0,255}")
# How many aliases a 422's message names; GET /v5/models lists them all.
NAMED_ALIASES = 20


def resolved(model: str, aliases: Mapping[str, str], vendors: Mapping[str, Any]) -> str:
    """`model` as `vendor/name`: an alias's model, else `model` itself when it is written
    `vendor/name` (whether the vendor is configured is the planner's to say, with a 404). `vendors`:
    the configured ones, which the 422 of a model that is neither names."""
    target = aliases.get(model)
    if target is not None:
        return target
    vendor, _, name = model.partition("/")
    if vendor and name:
        return model
    raise unnamed(model, aliases, vendors)


def unnamed(model: str, aliases: Mapping[str, str], vendors: Mapping[str, Any]) -> ValidationFailed:
    """The 422 of a `model` that is neither `vendor/name` nor an alias, in the contract's
    HTTPValidationError shape, saying how a model is named and what is configured."""
    names = sorted(aliases)
    if not names:
        known = "No aliases are configured ([aliases] in the config file)."
    else:
        more = len(names) - NAMED_ALIASES
        known = "Configured aliases: " + ", ".join(names[:NAMED_ALIASES]) + (
            f" and {more} more (GET /v5/models lists them)." if more > 0 else ".")
    message = (f"'{clip(model)}' is neither vendor/name nor an alias: write the model as vendor/name, a configured "
               f"vendor, a slash and that vendor's name for the model (e.g. openai/gpt-4o). Configured vendors: "
               f"{', '.join(sorted(vendors)) or 'none'}. {known}")
    return invalid_field(("model",), message, "value_error", clip(model))


def read_aliases(data: Mapping[str, Any], env: Mapping[str, str]) -> dict[str, str]:
    """`[aliases]` ("name" = "vendor/model") and/or GATEWAY_ALIASES="name=vendor/model;other=vendor/x"."""
    aliases: dict[str, Any] = dict(data.get("aliases", {}))
    for entry in filter(None, (part.strip() for part in env.get("GATEWAY_ALIASES", "").split(";"))):
        alias, _, model = entry.partition("=")
        aliases[alias.strip()] = model.strip()
    for alias, model in aliases.items():
        if not ALIAS_NAME.fullmatch(alias):
            raise ConfigError(f"aliases: {alias!r}: an alias is a name without '/' (letters, digits, '_', '.', ':' "
                              "or '-', starting with a letter or digit), e.g. \"gpt-4o\"")
        vendor, _, name = model.partition("/") if isinstance(model, str) else ("", "", "")
        if not vendor or not name:
            raise ConfigError(f"aliases: {alias!r} = {model!r}: an alias stands for a model written vendor/name, "
                              "e.g. \"openai/gpt-4o\"")
    return aliases


def check_aliases(aliases: Mapping[str, str], vendors: Mapping[str, Any]) -> None:
    """Every alias stands for a model of a configured vendor."""
    for alias, model in aliases.items():
        if (vendor := model.partition("/")[0]) not in vendors:
            raise ConfigError(f"aliases: {alias!r} = {model!r}: {vendor!r} is no configured vendor "
                              f"(configured: {', '.join(sorted(vendors)) or 'none'})")


def read_fallbacks(data: Mapping[str, Any], env: Mapping[str, str]) -> dict[str, tuple[str, ...]]:
    """`[fallbacks]` table ("vendor/model" = ["vendor/other", ...]) and/or
    GATEWAY_FALLBACKS="vendor/model=vendor/other,vendor/third;vendor/x=vendor/y"."""
    chains = {}
    for model, chain in data.get("fallbacks", {}).items():
        if not isinstance(chain, list) or not all(isinstance(m, str) for m in chain):
            raise ConfigError(f"fallbacks: {model!r}: give an array of models, e.g. [\"vendor/other\"]")
        chains[model] = tuple(chain)
    for entry in filter(None, (part.strip() for part in env.get("GATEWAY_FALLBACKS", "").split(";"))):
        model, _, chain = entry.partition("=")
        chains[model.strip()] = tuple(m.strip() for m in chain.split(",") if m.strip())
    for model, chain in chains.items():
        if "/" not in model or not chain or any("/" not in m for m in chain):
            raise ConfigError(f"fallbacks: {model!r} -> {list(chain)!r}: models are written vendor/name")
    return chains


def check_fallbacks(fallbacks: Mapping[str, Sequence[str]], vendors: Mapping[str, Any]) -> None:
    """Every model of a chain on a configured vendor, and no chain that leads back to its model."""
    for model, chain in fallbacks.items():
        for name in (model, *chain):
            if (vendor := name.partition("/")[0]) not in vendors:
                raise ConfigError(f"fallbacks: {model!r} -> {list(chain)!r}: {name!r} is on no configured vendor "
                                  f"({vendor!r}; configured: {', '.join(sorted(vendors)) or 'none'})")
        if model in chain:
            raise ConfigError(f"fallbacks: {model!r} falls back to itself")
        # A chain is not followed further (planner/fallbacks.py), but one that leads back is a mistake.
        for other in chain:
            if model in fallbacks.get(other, ()):
                raise ConfigError(f"fallbacks: a cycle: {model!r} -> {other!r} -> {model!r}")
