"""Assembly and cross-cutting parts of the gateway: app factory, config, auth, SSE, CLI."""
