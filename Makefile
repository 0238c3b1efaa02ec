# Each target installs what it needs into .venv (created from python3 >= 3.11).
PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed-$(shell cat pyproject.toml | cksum | cut -d' ' -f1)

.PHONY: run demo test bench lint clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip

$(STAMP): pyproject.toml | $(BIN)/python
	rm -f $(VENV)/.installed-*
	$(BIN)/python -m pip install --quiet -e '.[test,lint]'
	touch $@

install: $(STAMP)

run: $(STAMP)
	$(BIN)/roost run

demo: $(STAMP)
	$(BIN)/roost demo

test: $(STAMP)
	$(BIN)/python -m pytest -q $(PYTEST_ARGS)

bench: $(STAMP)
	$(BIN)/python -m bench

lint: $(STAMP)
	$(BIN)/ruff check kernel plugins tests bench
	$(BIN)/roost validate agents/*/agent.json

clean:
	rm -rf $(VENV) .pytest_cache
