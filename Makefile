# Each target installs what it needs into .venv (created from python3 >= 3.11).
PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed-$(shell cat pyproject.toml | cksum | cut -d' ' -f1)

.PHONY: run demo test bench lint clean conformance

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip

$(STAMP): pyproject.toml | $(BIN)/python
	rm -f $(VENV)/.installed-*
	$(BIN)/python -m pip install --quiet -e '.[test,lint]'
	touch $@

install: $(STAMP)

# Node 22 and the MCP conformance suite, from the npm registry, for the interop tests.
NODE_CACHE := .cache/node/node_modules/@modelcontextprotocol/conformance/package.json
$(NODE_CACHE): tests/conformance/install.sh
	@bash tests/conformance/install.sh >/dev/null || echo "warning: could not install the MCP conformance suite (npm needed); its tests will be skipped" >&2

run: $(STAMP)
	$(BIN)/roost run

demo: $(STAMP)
	$(BIN)/roost demo

test: $(STAMP) $(NODE_CACHE)
	$(BIN)/python -m pytest -q $(PYTEST_ARGS)

conformance: $(STAMP) $(NODE_CACHE)
	bash tests/conformance/run_server.sh
	bash tests/conformance/run_client.sh

bench: $(STAMP)
	$(BIN)/python -m bench

lint: $(STAMP)
	$(BIN)/ruff check kernel plugins tests bench
	$(BIN)/roost validate agents/*/agent.json

clean:
	rm -rf $(VENV) .pytest_cache
