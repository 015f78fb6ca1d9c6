"""TLS client contexts for the gateway's own connections to its stores (Redis, PostgreSQL): always
verifying the server, host name included unless the caller's setting says otherwise (libpq's
verify-ca), against a CA file the settings name or the system's CAs (which honour SSL_CERT_FILE).
The vendors' contexts are vendors/transport/client.py's `tls()`."""

from __future__ import annotations

import ssl

from gateway.core.errors import ConfigError


def client_context(cafile: str | None, certfile: str | None = None, keyfile: str | None = None, *,
                   names: tuple[str, str]) -> ssl.SSLContext:
    """A context trusting `cafile`'s CAs (None: the system's), presenting `certfile` (its key in it
    or in `keyfile`) when given. A file that cannot be used is a ConfigError naming the setting:
    `names` are how the settings call the CA file and the certificate ("redis_url ssl_ca_certs")."""
    try:
        context = ssl.create_default_context(cafile=cafile or None)
    except (OSError, ssl.SSLError) as exc:
        raise ConfigError(f"{names[0]}: not a readable PEM file of CA certificates ({exc})") from None
    if certfile:
        try:
            context.load_cert_chain(certfile, keyfile or None)
        except (OSError, ssl.SSLError) as exc:
            raise ConfigError(f"{names[1]}: not a certificate and its key ({exc})") from None
    return context
