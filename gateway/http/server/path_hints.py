"""What a request for a path the API lacks most likely meant. A client set up for another base URL
asks for `/v1/chat/completions` (OpenAI's), `/chat/completions` (no version), or `/v5/v5/completions`
(scale-gp-beta given `…/v5`): the path under `/v5` that its rest names is the one it wants, and a
404 that says so (and how to set the base URL) saves a new user the guessing."""

from __future__ import annotations

import re
from collections.abc import Iterable

from gateway.core.errors import clip

API_PREFIX = "/v5"
# Leading segments a wrong base URL may add (`/v1`, `/openai/v1`, `/v5/v1`...): at most this many
# are dropped in looking for the meant path.
MOST_DROPPED = 3

BASE_URL_HINT = (f"the API is under {API_PREFIX}: an OpenAI client's base URL is the gateway's address followed by "
                 f"{API_PREFIX} (e.g. http://<host>:<port>{API_PREFIX}); scale-gp-beta's is the address alone")


class PathHints:
    """The contract's `/v5` paths (`paths`: openapi.json's keys), matched with any parameter
    standing for one segment or more (a model's id holds a `/`)."""

    def __init__(self, paths: Iterable[str]) -> None:
        self._patterns = [re.compile("".join(".+" if part.startswith("{") else re.escape(part)
                                             for part in re.split(r"(\{[^}]+\})", path)))
                          for path in paths if path.startswith(API_PREFIX + "/")]

    def meant(self, path: str) -> str | None:
        """The API's path that `path` (which the API lacks) means: itself under `/v5`, or its rest
        after a few leading segments; None when nothing of the API is near."""
        segments = path.strip("/").split("/")
        for dropped in range(min(MOST_DROPPED, len(segments) - 1) + 1):
            candidate = f"{API_PREFIX}/" + "/".join(segments[dropped:])
            if candidate != path and any(pattern.fullmatch(candidate) for pattern in self._patterns):
                return candidate
        return None

    def message(self, path: str) -> str | None:
        """The 404's message for `path` when it means one of the API's paths, else None."""
        meant = self.meant(path)
        if meant is None:
            return None
        return f"no such path '{clip(path)}': did you mean {clip(meant)}? {BASE_URL_HINT}"
