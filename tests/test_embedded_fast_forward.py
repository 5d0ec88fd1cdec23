"""`EmbeddedProvider`'s fast-forward: the tokens the grammar forces, decoded in one batch.

Real llama.cpp and llguidance with the bundled SmolLM2-135M (marked `local`, like
tests/test_embedded.py). What fast-forward promises and these tests hold it to:

- it feeds exactly the tokens the token-by-token loop would have been forced to take: every
  forced step is one the grammar's mask leaves a single token at, in the tokenizer's own split
  of the forced text (no rare token path);
- each forced token's surviving mass is the model's own prediction for it, from the logits kept
  at its position in the batch (a replay one token at a time gives the same figures, within
  llama.cpp's batch arithmetic: see `test_forced_masses_match_a_one_token_replay`);
- output and diagnostics are identical to the token-by-token loop where the model has no choice
  (a run cut by `max_tokens` inside the forced key), and the document is valid everywhere.

A batched forward pass in this llama.cpp build is not bitwise equal to one-token passes (its
matrix kernels differ by batch size: logits differ by up to about 0.7 on the same context), so
where a 135M model has a near tie, greedy text after a forced run can differ from the
token-by-token text; the tests compare what is exact and bound what is arithmetic.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from typing import Any

import jsonschema
import pytest

from contracts import Decision
from contracts import InvoiceExtraction
from contracts import ReviewFinding
from contracts import Sentiment
from sdk import Contract
from sdk.providers import Completion
from sdk.providers import CompletionRequest
from sdk.providers import JsonDocument
from sdk.providers import Message
from sdk.providers import Sampling

pytestmark = pytest.mark.local

CASES: list[tuple[type[Contract], str, int]] = [
    (Decision, "Approve a $12 taxi receipt? Policy: taxis under $50 are fine.", 120),
    (Sentiment, "I love this phone.", 60),
    (ReviewFinding, "Review: app.py line 3 uses eval(input()).", 150),
    (
        InvoiceExtraction,
        "Extract this invoice.\n\nInvoice 17 from Acme Ltd. Total: 40.00 EUR.",
        200,
    ),
]


@pytest.fixture(scope="module")
def embedded() -> Iterator[Any]:
    try:
        from sdk.providers.embedded import EmbeddedProvider

        provider = EmbeddedProvider()
    except ImportError as missing:
        if os.environ.get("CI", "").strip().lower() not in ("", "0", "false"):
            pytest.fail(f"CI must run the local tests, but {missing}", pytrace=False)
        pytest.skip(str(missing))
    yield provider
    provider.close()


def _complete(
    embedded: Any, contract: type[Contract], prompt: str, max_tokens: int, **options: Any
) -> Completion:
    request = CompletionRequest(
        JsonDocument(contract), (Message("user", prompt),), max_tokens, options=Sampling.of(options)
    )
    completion: Completion = embedded.complete(request)
    return completion


@pytest.fixture(scope="module")
def runs(embedded: Any) -> dict[type[Contract], Completion]:
    return {
        c: _complete(embedded, c, prompt, limit, fast_forward=True) for c, prompt, limit in CASES
    }


@pytest.mark.parametrize("contract", [case[0] for case in CASES], ids=lambda c: c.__name__)
def test_fast_forwarded_steps_are_exactly_the_grammars_forced_steps(
    embedded: Any, runs: dict[type[Contract], Completion], contract: type[Contract]
) -> None:
    import numpy as np
    from llguidance import LLMatcher
    from llguidance.numpy import allocate_token_bitmask
    from llguidance.numpy import fill_next_token_bitmask

    completion = runs[contract]
    assert completion.diagnostics is not None
    steps = completion.diagnostics.steps
    assert "".join(step.text for step in steps) == completion.text
    assert completion.usage.output_tokens == len(steps)
    # The document is of the contract's schema: fast-forward kept to the grammar.
    jsonschema.validate(json.loads(completion.text), contract.json_schema())
    engine = embedded._loaded()
    matcher = LLMatcher(engine.tokenizer, embedded.grammar_for(contract), log_level=0)
    bitmask = allocate_token_bitmask(1, engine.n_vocab)
    forced_runs: list[list[int]] = [[]]
    for step in steps:
        # Replayed token by token, the grammar allows what the step says it allowed: a forced
        # step is one where the mask leaves that single token.
        fill_next_token_bitmask(matcher, bitmask)
        allowed = np.unpackbits(bitmask.view(np.uint8), bitorder="little")[: engine.n_vocab]
        assert allowed[step.token] and int(allowed.sum()) == step.allowed
        assert matcher.consume_token(step.token)
        if step.allowed == 1:
            forced_runs[-1].append(step.token)
        elif forced_runs[-1]:
            forced_runs.append([])
    forced = [run for run in forced_runs if run]
    assert forced, "every reference contract has forced keys"
    # Each forced run is the tokenizer's own split of its text, as the model would write it.
    for run in forced:
        text = engine.tokenizer.decode_bytes(run)
        assert engine.tokenizer.tokenize_bytes(text) == run


@pytest.mark.parametrize("contract", [Decision, InvoiceExtraction], ids=lambda c: c.__name__)
def test_forced_masses_match_a_one_token_replay(
    embedded: Any, runs: dict[type[Contract], Completion], contract: type[Contract]
) -> None:
    import numpy as np

    from sdk.providers.embedded import surviving_mass

    completion = runs[contract]
    assert completion.diagnostics is not None
    steps = completion.diagnostics.steps
    engine = embedded._loaded()
    prompt = next(case[1] for case in CASES if case[0] is contract)
    request = CompletionRequest(JsonDocument(contract), (Message("user", prompt),), 1)
    with engine.lock:
        engine._evaluate_prompt(engine.prompt_tokens(request, embedded._instruction(request)))
        replayed = []
        for step in steps:
            logits = engine._logits()
            only = np.zeros(engine.n_vocab, dtype=bool)
            only[step.token] = True
            replayed.append(surviving_mass(logits, only))
            engine.llm.eval([step.token])
    forced = [
        (step.mass, again) for step, again in zip(steps, replayed, strict=True) if step.allowed == 1
    ]
    assert len(forced) >= 3
    # The mass is read at the forced token's own position in the batch: a row off by one would
    # put most of these near 0 (the model's probability of a key token after another).
    for mass, again in forced:
        assert abs(mass - again) < 0.1, (mass, again)


@pytest.mark.parametrize("limit", [1, 2, 3, 4])
def test_max_tokens_inside_a_forced_run_is_the_token_by_token_result(
    embedded: Any, limit: int
) -> None:
    # `{"reasoning": ...`: the first three tokens are forced; a limit inside them cuts the run
    # where token by token would have stopped, and the figures are the same.
    prompt = CASES[0][1]
    fast = _complete(embedded, Decision, prompt, limit, fast_forward=True)
    slow = _complete(embedded, Decision, prompt, limit, fast_forward=False)
    assert fast.text == slow.text and fast.usage == slow.usage
    assert fast.usage.output_tokens == limit
    assert fast.raw_stop_reason == slow.raw_stop_reason == "limit"
    assert fast.diagnostics is not None and slow.diagnostics is not None
    fast_steps, slow_steps = fast.diagnostics.steps, slow.diagnostics.steps
    assert [(s.token, s.text, s.allowed) for s in fast_steps] == [
        (s.token, s.text, s.allowed) for s in slow_steps
    ]
    for a, b in zip(fast_steps, slow_steps, strict=True):
        assert abs(a.mass - b.mass) < 0.1


def test_fast_forward_off_is_an_option_per_call_and_per_provider(embedded: Any) -> None:
    from sdk.providers.embedded import EmbeddedProvider

    assert EmbeddedProvider(fast_forward=True)._settings.fast_forward is True
    assert embedded._settings.fast_forward is False  # the default: token by token
    slow = _complete(embedded, Sentiment, CASES[1][1], 60, fast_forward=False)
    again = _complete(embedded, Sentiment, CASES[1][1], 60, fast_forward=False)
    assert slow.text == again.text  # the token-by-token loop is deterministic at temperature 0
    jsonschema.validate(json.loads(slow.text), Sentiment.json_schema())
