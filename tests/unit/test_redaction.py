"""gateway/core/redaction.py: what key-shaped text becomes, whoever quotes it."""

from __future__ import annotations

import pytest

from gateway.core.redaction import Redactor


@pytest.mark.parametrize(("text", "scrubbed"), [
    ("Proxy-Authorization: Basic Z2F0ZXdheTpwcjB4eS1zM2NyZXQ=", "Proxy-Authorization: [redacted]"),
    ("authorization: Bearer abcdefghijklmnop", "authorization: [redacted]"),
    ('{"authorization": "basic dXNlcjpwYXNz"}', '{"authorization": "[redacted]"}'),
])
def test_an_auth_headers_credentials_go_whole_whatever_their_scheme(text, scrubbed):
    assert Redactor()(text) == scrubbed


def test_a_proxy_password_configured_is_scrubbed_wherever_it_appears():
    assert Redactor(["pr0xy-s3cret"])("proxy http://gateway:pr0xy-s3cret@proxy:3128 said no") == (
        "proxy http://gateway:[redacted]@proxy:3128 said no")
