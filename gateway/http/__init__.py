"""The HTTP side: Connexion assembly and its fast path, validation, security, the SSE writer, the
server, logs. See gateway/__init__.py for where it sits among the layers."""

import warnings

# Connexion imports Starlette's test client at start-up, which warns that it prefers `httpx2` to the
# `httpx` the gateway uses for its vendors: noise in every `gateway serve` of a plain install.
warnings.filterwarnings("ignore", message=r"Using `httpx` with `starlette\.testclient` is deprecated")
