"""The HTTP side. Here: request orchestration, what a request does once its handler has it (its
lifecycle, `serve`, the SSE writer, the response cache as a request meets it, what a handler is
given). Beside it: the server and the Connexion layer (server/), metrics, traces and logs
(observe/), the dashboard (ui/). See gateway/__init__.py for where it sits among the layers."""

import warnings

# Connexion imports Starlette's test client at start-up, which warns that it prefers `httpx2` to the
# `httpx` the gateway uses for its vendors: noise in every `gateway serve` of a plain install.
warnings.filterwarnings("ignore", message=r"Using `httpx` with `starlette\.testclient` is deprecated")
