"""The HTTP server, apart from what a request does once a handler has it (request orchestration:
gateway/http/ beside it): uvicorn in this process or in worker processes (server.py), the
connection protocol (connection.py: head and keep-alive limits, shutdown), the Connexion app built
from openapi.json (app.py) and every override of Connexion (connexion_overrides/, one module per
job), and what runs before a handler: the API-key check (security.py), the body's reading and
validation (validation.py), the path a 404 meant (path_hints.py). hooks.py checks that the
libraries' private hooks the server relies on still exist."""
