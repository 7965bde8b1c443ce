# Corral developer entry points. Every target creates the virtualenv if needed.
PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed

.PHONY: venv test lint types unit template-check run demo bench chaos clean

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[dev]'
	touch $(STAMP)

venv: $(STAMP)

lint: $(STAMP)
	$(BIN)/ruff check functions agent_runtime tests benchmarks infra
	$(BIN)/ruff format --check functions agent_runtime tests benchmarks infra

types: $(STAMP)
	$(BIN)/mypy

unit: $(STAMP)
	$(BIN)/pytest

# sam validate + cfn-lint in their own venv (.venv-sam); prints "skipped: ..." and succeeds
# where that venv cannot be built, fails on a real template error.
template-check:
	infra/check.sh

test: lint types unit template-check

# Benchmarks are slow and print figures for docs/benchmarks.md; never part of `make test`.
bench: $(STAMP)
	$(BIN)/python benchmarks/cold_start.py
	$(BIN)/python benchmarks/sim_policies.py
	$(BIN)/python benchmarks/scale_moto.py
	$(BIN)/python benchmarks/submit_latency.py
	$(BIN)/python benchmarks/sim_workloads.py
	$(BIN)/python benchmarks/agent_death.py

# The chaos soak: 200 trials through the real handlers against moto while functions crash,
# messages repeat, EC2 refuses and spot instances vanish (a few minutes; figures and fault
# rates in docs/reliability.md). `make test` runs a short seeded variant of it.
chaos: $(STAMP)
	$(BIN)/python -m tests.chaos --trials 200 --seed 1

run: $(STAMP)
	$(BIN)/corral dev up --config examples/cluster.yaml

clean:
	rm -rf $(VENV) .venv-sam .mypy_cache .pytest_cache .ruff_cache .corral

# The local stack end to end: submit the example grid, interrupt a spot instance midway,
# wait for every trial and for idle instances to be reaped, print a summary (< 5 minutes).
demo: $(STAMP)
	$(BIN)/python -m corral.cli.demo
