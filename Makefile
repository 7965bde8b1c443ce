# Corral developer entry points. Every target creates the virtualenv if needed.
PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed

.PHONY: venv test lint types unit run demo bench clean

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[dev]'
	touch $(STAMP)

venv: $(STAMP)

lint: $(STAMP)
	$(BIN)/ruff check functions agent_runtime tests benchmarks
	$(BIN)/ruff format --check functions agent_runtime tests benchmarks

types: $(STAMP)
	$(BIN)/mypy

unit: $(STAMP)
	$(BIN)/pytest

test: lint types unit

run: $(STAMP)
	$(BIN)/corral dev up --config examples/cluster.yaml

clean:
	rm -rf $(VENV) .mypy_cache .pytest_cache .ruff_cache
