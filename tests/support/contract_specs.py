"""A small OpenAPI 3.1 document for the contract gate's tests (contract/): one path with a request
that takes a body, parameters and headers, answers with fields, enums and a stream, and a schema
that refers to itself, reached from both a request and a response."""

from __future__ import annotations

import copy
import json
from collections.abc import Callable
from pathlib import Path

PATH = "/things/{thing_id}"

_SPEC = {
    "openapi": "3.1.0",
    "info": {"title": "Things", "version": "1.0.0", "description": "A small contract."},
    "paths": {
        PATH: {
            "post": {
                "operationId": "make",
                "security": [{"Key": []}],
                "parameters": [
                    {"name": "thing_id", "in": "path", "required": True, "schema": {"type": "string"}},
                    {"name": "mode", "in": "query", "required": False,
                     "schema": {"type": "string", "enum": ["a", "b"]}},
                    {"name": "x-trace", "in": "header", "schema": {"type": "string"}},
                ],
                "requestBody": {"required": True, "content": {"application/json": {
                    "schema": {"$ref": "#/components/schemas/Request"}}}},
                "responses": {
                    "200": {"description": "made",
                            "headers": {"x-id": {"required": True, "schema": {"type": "string"}}},
                            "content": {"application/json": {"schema": {"$ref": "#/components/schemas/Answer"}},
                                        "text/event-stream": {"schema": {"type": "string"}}}},
                    "422": {"description": "refused", "content": {"application/json": {
                        "schema": {"$ref": "#/components/schemas/Error"}}}},
                },
            },
            "get": {
                "operationId": "read",
                "security": [{"Key": []}],
                "responses": {"200": {"description": "the thing", "content": {"application/json": {
                    "schema": {"$ref": "#/components/schemas/Answer"}}}}},
            },
        },
    },
    "components": {
        "securitySchemes": {"Key": {"type": "apiKey", "in": "header", "name": "x-api-key"}},
        "schemas": {
            "Request": {
                "type": "object", "required": ["model"], "additionalProperties": False,
                "properties": {
                    "model": {"type": "string", "pattern": "^[a-z]+/.+$", "minLength": 3, "maxLength": 64},
                    "n": {"type": ["integer", "null"], "minimum": 1, "maximum": 8, "default": 1},
                    "effort": {"type": "string", "enum": ["low", "high"]},
                    "tags": {"type": "array", "items": {"type": "string", "maxLength": 10}, "maxItems": 4},
                    "stop": {"anyOf": [{"type": "string"}, {"type": "array", "items": {"type": "string"}},
                                       {"type": "null"}]},
                    "options": {"type": "object", "properties": {"verbose": {"type": "boolean"}}},
                    "when": {"type": "string"},
                    "tree": {"$ref": "#/components/schemas/Tree"},
                },
            },
            "Answer": {
                "type": "object", "required": ["id", "status", "choices"],
                "properties": {
                    "id": {"type": "string"},
                    "status": {"$ref": "#/components/schemas/Status"},
                    "score": {"type": "number", "minimum": 0, "maximum": 1},
                    "code": {"type": "string", "pattern": "^[A-Z]{3}$"},
                    "choices": {"type": "array", "items": {"$ref": "#/components/schemas/Choice"}},
                    "tree": {"$ref": "#/components/schemas/Tree"},
                    "extra": {"type": "object", "additionalProperties": {"type": "integer"}},
                },
            },
            "Status": {"type": "string", "enum": ["done", "failed"]},
            "Choice": {"type": "object", "required": ["text"],
                       "properties": {"text": {"type": "string"}, "index": {"type": "integer"}}},
            "Tree": {"type": "object", "properties": {
                "name": {"type": "string"},
                "children": {"type": "array", "items": {"$ref": "#/components/schemas/Tree"}}}},
            "Error": {"type": "object", "properties": {"detail": {"type": "string"}}},
        },
    },
}

CHANGELOG = """# The contract's changelog

## [Unreleased]

## [1.0.0] - 2026-12-01

The first release.
"""


def small_spec() -> dict:
    return copy.deepcopy(_SPEC)


def edited(edit: Callable[[dict], object], version: str | None = None, spec: dict | None = None) -> dict:
    """A copy of `spec` (the small one by default) with `edit` applied, at `version` if given."""
    changed = copy.deepcopy(spec if spec is not None else _SPEC)
    edit(changed)
    if version is not None:
        changed["info"]["version"] = version
    return changed


def schemas(spec: dict) -> dict:
    return spec["components"]["schemas"]


def operation(spec: dict, method: str = "post") -> dict:
    return spec["paths"][PATH][method]


def write_repository(root: Path, released: dict, current: dict, changelog: str = CHANGELOG) -> dict[str, Path]:
    """The gate's three files under `root`: openapi.json, contract/released.json, contract/CHANGELOG.md."""
    (root / "contract").mkdir(parents=True, exist_ok=True)
    paths = {"spec": root / "openapi.json", "released": root / "contract" / "released.json",
             "changelog": root / "contract" / "CHANGELOG.md"}
    paths["spec"].write_text(json.dumps(current, indent=2))
    paths["released"].write_text(json.dumps(released, indent=2))
    paths["changelog"].write_text(changelog)
    return paths
