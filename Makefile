# Each target creates .venv and installs what it needs from this repository's own files.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: test lint typecheck demo bench clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip

$(STAMP): pyproject.toml | $(BIN)/python
	$(BIN)/python -m pip install --quiet -e ".[dev]"
	touch $(STAMP)

lint: $(STAMP)
	$(BIN)/ruff check sdk contracts tests bench examples

typecheck: $(STAMP)
	$(BIN)/mypy --strict sdk contracts

test: lint typecheck
	$(BIN)/pytest -q

demo: $(STAMP)
	$(BIN)/python -m sdk.cli demo

bench: $(STAMP)
	$(BIN)/python bench/run.py

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache
