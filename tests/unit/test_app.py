"""The app as `gateway serve` builds it (gateway/http/server/app.py): the contract it hands Connexion."""

from __future__ import annotations

import orjson
from connexion.spec import Specification

from gateway.http.server.app import spec_path


def test_the_contract_handed_over_parsed_is_what_connexion_would_read_from_its_file():
    # The app gives Connexion the parsed document (gateway/http/server/app.py); from the path, Connexion
    # renders the file as a Jinja2 template and reads it as YAML, which a JSON document survives
    # unchanged only while it holds no template syntax and no number YAML 1.1 reads otherwise.
    assert Specification._load_spec_from_file(None, spec_path()) == orjson.loads(spec_path().read_bytes())
