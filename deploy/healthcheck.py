"""The image's HEALTHCHECK: is this container's gateway ready (GET /readyz answers 200)? Python's
standard library alone, so that the image needs no curl. The port and address are the gateway's
own settings, GATEWAY_PORT and GATEWAY_HOST (a wildcard address is asked on loopback)."""

import os
import sys
import urllib.request

host = os.environ.get("GATEWAY_HOST", "127.0.0.1")
host = {"0.0.0.0": "127.0.0.1", "::": "::1", "": "127.0.0.1"}.get(host, host)
url = f"http://{f'[{host}]' if ':' in host else host}:{os.environ.get('GATEWAY_PORT', '8000')}/readyz"
try:
    with urllib.request.urlopen(url, timeout=float(os.environ.get("HEALTHCHECK_TIMEOUT", "4"))) as answer:
        sys.exit(0 if answer.status == 200 else 1)
except OSError as exc:  # refused, timed out, or an HTTP error status (503 while degraded)
    print(f"{url}: {exc}", file=sys.stderr)
    sys.exit(1)
