"""A path on a vendor's server under its base URL, as an operator configures one (the `http`
protocol's `path`, an OpenAI-protocol vendor's `inference_path`): checked as it loads so that no
configured path can leave the base URL it is joined to. Shared by the protocols that take one, so
that none imports another's folder."""

from __future__ import annotations

import re
from typing import Annotated

from pydantic import AfterValidator

MAX_PATH_CHARS = 512
# A path's characters: RFC 3986's unreserved and sub-delims, ':' and '@' (pchar), '/' between
# segments, and one '?' before a query of the same characters. No '%': an encoded '/' or '.' is how
# a path climbs out of its base behind a check of its text; no '\\', '#', spaces or controls.
_PATH = re.compile(r"/[A-Za-z0-9._~!$&'()*+,;=:@/-]*(\?[A-Za-z0-9._~!$&'()*+,;=:@/-]*)?")

def server_path(path: str) -> str:
    """A path under the base URL: starts with '/', has no '.' or '..' segment, no '//' (which a
    URL joiner would read as a new host), no percent-escapes, and only URL-safe characters."""
    if len(path) > MAX_PATH_CHARS:
        raise ValueError(f"a path is at most {MAX_PATH_CHARS} characters")
    if not _PATH.fullmatch(path):
        raise ValueError("a path starts with '/' and holds only URL-safe characters (no '%', '\\', '#', "
                         "spaces or controls; at most one '?')")
    segments = path.split("?", 1)[0].split("/")[1:]
    if path.startswith("//") or any(s in (".", "..") for s in segments):
        raise ValueError("a path cannot leave the base URL ('//', '.' or '..' segments)")
    return path


ServerPath = Annotated[str, AfterValidator(server_path)]
