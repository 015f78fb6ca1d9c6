"""OpenAPI 3.1, loaded. Connexion checks a document against its OpenAPI 3.0 meta-schema and refuses
3.1 (spec-first/connexion#1396, unmerged); everything else it does with the document works for ours.
openapi.json is validated as 3.1 elsewhere: by a test (openapi-spec-validator) and by schemathesis."""

from __future__ import annotations

from typing import Any

from connexion.spec import OpenAPISpecification

HOOKS: tuple[tuple[Any, str], ...] = ((OpenAPISpecification, "_validate_spec"),)


def accept_openapi_31() -> None:
    OpenAPISpecification._validate_spec = classmethod(lambda cls, spec: None)  # type: ignore[method-assign]
