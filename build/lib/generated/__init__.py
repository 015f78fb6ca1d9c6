"""Models generated from openapi.json by `make generate` (datamodel-code-generator). Never edit by hand."""
