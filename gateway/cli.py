"""The `gateway` command: `gateway serve` runs the server."""

from __future__ import annotations

import argparse
import dataclasses
import sys

from gateway.config import Settings
from gateway.errors import ConfigError


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="gateway", description="LLM completions gateway (EGP API v5)")
    commands = parser.add_subparsers(dest="command", required=True)
    serve = commands.add_parser("serve", help="run the HTTP server")
    serve.add_argument("--host", help="listen address (default GATEWAY_HOST or 127.0.0.1)")
    serve.add_argument("--port", type=int, help="listen port (default GATEWAY_PORT or 8000)")
    args = parser.parse_args(argv)
    try:
        settings = Settings.load()
    except ConfigError as exc:
        print(f"gateway: configuration error: {exc}", file=sys.stderr)
        return 2
    if args.command == "serve":
        return _serve(settings, args.host, args.port)
    return 2


def _serve(settings: Settings, host: str | None, port: int | None) -> int:
    from gateway import server
    from gateway.app import create_app

    settings = dataclasses.replace(settings, host=host or settings.host, port=port or settings.port)
    server.run(create_app(settings), settings)
    return 0


if __name__ == "__main__":
    sys.exit(main())
