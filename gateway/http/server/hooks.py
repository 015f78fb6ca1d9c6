"""Checking that the private names of a library the gateway reaches into still exist, so that an
upgrade which removes one fails loudly at start-up (and in a test) instead of misbehaving later.
Used for Connexion (http/server/connexion_overrides/) and uvicorn (http/server/connection.py)."""

from __future__ import annotations

import inspect
from collections.abc import Iterable
from typing import Any


def missing(hooks: Iterable[tuple[Any, str]]) -> list[str]:
    """The `owner.name` of every (owner, name) pair that no longer exists. An instance attribute
    counts as present when the owner's __init__ assigns it (`self.name`)."""
    gone = []
    for owner, name in hooks:
        if hasattr(owner, name):
            continue
        try:
            assigned = f"self.{name}" in inspect.getsource(owner.__init__)
        except (OSError, TypeError):  # an __init__ without Python source (object's own)
            assigned = False
        if not assigned:
            gone.append(f"{owner.__module__}.{owner.__qualname__}.{name}")
    return gone
