"""The Connexion internals the gateway relies on (gateway/http/server/connexion_overrides/) still exist:
an upgrade that removes one fails here, and at start-up, naming it."""

from __future__ import annotations

import pytest
from connexion.middleware.request_validation import RequestValidationOperation
from connexion.security import AbstractSecurityHandler

from gateway.http.server import connexion_overrides
from gateway.http.server.connexion_overrides import ConnexionHookMissing, check_hooks


def test_every_private_hook_the_overrides_use_exists():
    check_hooks()


@pytest.mark.parametrize(
    ("owner", "name", "named"),
    [
        (AbstractSecurityHandler, "_resolve_func", "ApiKeySecurityHandler._resolve_func"),
        (RequestValidationOperation, "validate_mime_type", "RequestValidationOperation.validate_mime_type"),
    ],
)
def test_a_missing_hook_fails_loudly_naming_it(owner, name, named, monkeypatch):
    monkeypatch.delattr(owner, name)
    with pytest.raises(ConnexionHookMissing, match=named):
        check_hooks()


def test_an_instance_attribute_set_in_init_counts_as_present_and_its_removal_is_seen(monkeypatch):
    # `_operation` is assigned in RequestValidationOperation.__init__, not on the class.
    assert not hasattr(RequestValidationOperation, "_operation")
    check_hooks()
    monkeypatch.setattr(connexion_overrides, "_HOOKS", ((RequestValidationOperation, "_no_such_attribute"),))
    with pytest.raises(ConnexionHookMissing, match="_no_such_attribute"):
        check_hooks()
