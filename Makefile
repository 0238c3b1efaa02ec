# Each target installs what it needs into .venv (created from python3 >= 3.11).
PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
# One stamp per extras set, named after pyproject.toml's checksum: `make run` installs the
# runtime dependencies only, `make test` and `make lint` add their extras on top, and
# switching between targets installs nothing again (a changed pyproject.toml redoes all).
SUM    := $(shell cksum < pyproject.toml | cut -d' ' -f1)
RUNTIME := $(VENV)/.installed-runtime-$(SUM)
TESTING := $(VENV)/.installed-test-$(SUM)
LINTING := $(VENV)/.installed-lint-$(SUM)
# setuptools notes every editable install of a layout like ours ("Editable installation.
# Please be careful with folders ... named like your package"); it does not apply here.
PIP    := PYTHONWARNINGS="ignore:Editable installation" $(BIN)/python -m pip --quiet --disable-pip-version-check
EXTRAS := $(BIN)/python -c 'import sys, tomllib; print("\n".join(tomllib.load(open("pyproject.toml", "rb"))["project"]["optional-dependencies"][sys.argv[1]]))'

.PHONY: run demo test bench lint clean conformance install

$(BIN)/python:
	@echo "creating $(VENV)/ with $(PYTHON)…"
	@$(PYTHON) -m venv $(VENV)
	@$(PIP) install --upgrade pip

$(RUNTIME): pyproject.toml | $(BIN)/python
	@echo "installing roost and its runtime dependencies into $(VENV)/…"
	@rm -f $(VENV)/.installed-*
	@$(PIP) install -e .
	@touch $@

# An extras set: its requirements from pyproject.toml, without rebuilding roost itself.
$(TESTING) $(LINTING): $(VENV)/.installed-%-$(SUM): $(RUNTIME)
	@echo "installing the $* extras into $(VENV)/…"
	@$(EXTRAS) $* > $(VENV)/requirements-$*.txt
	@$(PIP) install -r $(VENV)/requirements-$*.txt
	@touch $@

install: $(TESTING) $(LINTING)

# Node 22 and the MCP conformance suite, from the npm registry, for the interop tests
# (at most 5 minutes where `timeout` exists: an unreachable registry must not stall `make test`).
NODE_CACHE := .cache/node/node_modules/@modelcontextprotocol/conformance/package.json
$(NODE_CACHE): tests/conformance/install.sh
	@$$(command -v timeout >/dev/null && echo timeout 300) bash tests/conformance/install.sh >/dev/null || echo "warning: could not install the MCP conformance suite (npm needed); its tests will be skipped" >&2

# Debian's chromium and chromedriver for the dashboard's browser test (no browser download):
# installed when missing where this runs as root with apt-get; elsewhere that test is skipped.
CHROMEDRIVER := /usr/bin/chromedriver
$(CHROMEDRIVER):
	@$$(command -v timeout >/dev/null && echo timeout 600) bash tests/plugins/http/install_chromium.sh || echo "warning: could not install chromium and chromium-driver; the dashboard's browser test will be skipped" >&2

run: $(RUNTIME)
	$(BIN)/roost run

demo: $(RUNTIME)
	$(BIN)/roost demo

test: $(TESTING) $(NODE_CACHE) $(CHROMEDRIVER)
	$(BIN)/python -m pytest -q $(PYTEST_ARGS)

conformance: $(TESTING) $(NODE_CACHE)
	bash tests/conformance/run_server.sh
	bash tests/conformance/run_client.sh

bench: $(TESTING)
	$(BIN)/python -m bench

lint: $(LINTING)
	$(BIN)/ruff format --check kernel plugins tests bench
	$(BIN)/ruff check kernel plugins tests bench
	$(BIN)/roost validate agents/*/agent.json

clean:
	rm -rf $(VENV) .pytest_cache
