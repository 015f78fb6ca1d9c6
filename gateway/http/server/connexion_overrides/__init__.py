"""Every place the gateway reaches into Connexion's internals, one module per job, for one version.

Written against Connexion 3.3.0 (`CONNEXION_VERSION`). Each module declares the private names it
relies on (its `HOOKS`); `check_hooks()` asserts that every one of them still exists. The app
calls it at start-up and tests/unit/test_connexion_overrides.py calls it too, so an upgrade that removes
a hook fails loudly at once instead of misbehaving later. What Connexion still does per request,
why each job below is the gateway's, the measurement and what an upgrade must check:
docs/decisions/0001-connexion.md.

- spec_loading.py: OpenAPI 3.1 loads (Connexion refuses it).
- fixed_routes.py: the contract's fixed paths routed by one lookup, past Connexion's routing.
- chain.py: each operation's chain linked out of the layers Connexion built, link to link.
- prepared_validation.py: the validation layer, its validators built once per operation, and the
  class through which Connexion hands a JSON body to http/server/validation.py.
- direct_call.py: the handler called with one HandlerRequest, not with injected arguments.
- key_check.py: the security schemes answered by http/server/security.py's key check, called directly.
- docs_page.py: Connexion's docs page layer, naming the one path it serves.
"""

from __future__ import annotations

import logging
from importlib.metadata import version
from typing import Any

from gateway.http.server import hooks
from gateway.http.server.connexion_overrides import (
    chain,
    direct_call,
    docs_page,
    fixed_routes,
    key_check,
    prepared_validation,
    spec_loading,
)

log = logging.getLogger("gateway")

CONNEXION_VERSION = "3.3.0"

# (owner, private attribute) pairs these modules rely on (checked by gateway/http/server/hooks.py).
_HOOKS: tuple[tuple[Any, str], ...] = (
    direct_call.HOOKS + spec_loading.HOOKS + prepared_validation.HOOKS + key_check.HOOKS + docs_page.HOOKS
    + chain.HOOKS + fixed_routes.HOOKS
)


class ConnexionHookMissing(RuntimeError):
    """A Connexion internal the gateway relies on is gone (an upgrade changed it)."""


def check_hooks() -> None:
    """Fail when a private Connexion hook used here is gone; warn when the version differs."""
    missing = hooks.missing(_HOOKS)
    if missing:
        raise ConnexionHookMissing(
            f"Connexion {version('connexion')} lacks what gateway/http/server/connexion_overrides/ relies on "
            f"(written for {CONNEXION_VERSION}): {', '.join(missing)}")
    if version("connexion") != CONNEXION_VERSION:
        log.warning("Connexion %s is installed; gateway/http/server/connexion_overrides/ was written for %s",
                    version("connexion"), CONNEXION_VERSION)
