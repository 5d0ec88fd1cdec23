"""The differential fuzzer: every engine reads a grammar the same way, or the grammar is refused.

Hypothesis writes grammars (`tests.grammar_strategies`: literals from the whole Unicode range,
classes, repetition, alternation, recursion), the SDK's sampler draws sentences from each, and
near-miss mutations of them are added; then four readers judge every text:

- the client recognizer (`sdk.grammar.recognize`), which decides every call;
- llguidance on the Lark text (the embedded provider, OpenAI's custom tools);
- llguidance on the GBNF the SDK writes, and llama.cpp's own grammar sampler on the same GBNF
  (llama.cpp, vLLM), when the conversion is not refused.

A disagreement fails the test; a grammar the SDK refuses (`InvalidGrammar`) or refuses to
convert (`UnconvertibleGrammar`) is counted, never compared. `make test` runs a bounded number
of examples (`SDK_FUZZ_EXAMPLES`, default below); `make fuzz` runs many more.
Marked `local`: llguidance and llama.cpp come with the local extra.
"""

from __future__ import annotations

import contextlib
import os
import re
import unicodedata
from collections.abc import Callable
from collections.abc import Iterator

import pytest
from hypothesis import HealthCheck
from hypothesis import Phase
from hypothesis import event
from hypothesis import given
from hypothesis import settings
from hypothesis import strategies as st

from sdk import Grammar
from sdk.grammar import GrammarMiss
from sdk.grammar import InvalidGrammar
from sdk.grammar import UnconvertibleGrammar
from sdk.grammar import gbnf_to_lark
from sdk.grammar import lark_to_gbnf
from sdk.grammar import recognize
from sdk.grammar import to_gbnf
from sdk.grammar._compiled import compile_grammar
from sdk.grammar._sentences import Sampler
from tests.grammar_strategies import gbnf_grammars
from tests.grammar_strategies import lark_grammars
from tests.grammar_strategies import near_misses
from tests.grammar_support import grammar_accepts
from tests.grammar_support import lark_accepts
from tests.grammar_support import lark_accepts_prefix
from tests.llamacpp_grammar import llamacpp_accepts
from tests.llamacpp_grammar import require_llamacpp
from tests.llamacpp_grammar import round_trips

pytestmark = pytest.mark.local

require_llamacpp()

EXAMPLES = int(os.environ.get("SDK_FUZZ_EXAMPLES", "60"))
SENTENCES = 6
MUTATIONS = 6
# `SDK_FUZZ_SHRINK=0` reports a failure as found, without shrinking it (faster to triage).
PHASES = [Phase.explicit, Phase.reuse, Phase.generate]
FUZZ = settings(
    max_examples=EXAMPLES,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
    phases=[*PHASES, Phase.shrink] if os.environ.get("SDK_FUZZ_SHRINK", "1") != "0" else PHASES,
)


def _texts(data: st.DataObject, lark_text: str, seed: int) -> list[str]:
    """Sentences of the grammar, near misses of them, and the empty text."""
    with _refused_as_too_ambiguous():  # the sampler checks its sentences with the recognizer
        sentences = Sampler(compile_grammar(lark_text)).sentences(SENTENCES, seed=seed)
    alphabet = "".join(sorted(set("".join(sentences))))
    texts = ["", *sentences]
    for _ in range(MUTATIONS):
        base = data.draw(st.sampled_from(sentences)) if sentences else ""
        texts.append(data.draw(near_misses(base, alphabet)))
    return texts


def _same_tables(text: str, grammar_text: str) -> bool:
    """Whether every engine's Unicode tables know the text's characters, where the grammar
    asks them (class escapes, case folding): each engine ships its own Unicode version, and
    the SDK reads classes and folding from Python's; a character assigned since is read
    differently by each, the other documented difference."""
    if not re.search(r"\\[dDwWsS]|/[a-z]*i\b|\"i|[/)]i", grammar_text):
        return True
    return all(unicodedata.category(char) != "Cn" for char in text)


def _llama_can_spell(text: str) -> bool:
    """Whether llama.cpp can judge the text: its tokenizer spells it back exactly, and it has
    no U+0000, which llama.cpp's grammar engine never matches (it ends its strings): a grammar
    that allows U+0000 is narrower there on llama.cpp, the one documented difference."""
    return "\x00" not in text and round_trips(text)


class TooAmbiguous(Exception):
    """The recognizer refused the grammar as too ambiguous for its work budget."""


@contextlib.contextmanager
def _refused_as_too_ambiguous() -> Iterator[None]:
    """`InvalidGrammar` for a grammar too ambiguous for the recognizer's budget (the
    documented bound, `_earley.WORK_PER_CHARACTER`) as `TooAmbiguous`: the test stops there."""
    try:
        yield
    except InvalidGrammar as refused:
        if "too ambiguous" not in str(refused):
            raise
        event("refused while recognizing: too ambiguous")
        raise TooAmbiguous from refused


Judge = Callable[[str], "bool | None"]
"""An engine's verdict on a text: accepted or not, None when it cannot judge that text."""


def _llama(gbnf: str) -> Judge:
    return lambda text: llamacpp_accepts(gbnf, text) if _llama_can_spell(text) else None


def _judge_all(
    grammar: Grammar, text: str, judges: list[tuple[str, Judge]], shown: str
) -> GrammarMiss | None:
    """The client's verdict on `text`, asserted equal to every judge's that can judge it."""
    with _refused_as_too_ambiguous():
        miss = recognize(grammar, text)
    client = miss is None
    event("sentence" if client else "not a sentence")
    for name, judge in judges:
        verdict = judge(text)
        if verdict is not None:
            assert verdict == client, (
                f"{name} says {verdict}, the client says {client}, on {text!r} for\n{shown}"
            )
    return miss


@FUZZ
@given(lark_grammars(), st.integers(0, 2**32 - 1), st.data())
def test_lark_grammars_read_the_same_on_every_engine(
    lark_text: str, seed: int, data: st.DataObject
) -> None:
    try:
        grammar = Grammar("Fuzz", lark=lark_text)
    except InvalidGrammar as refused:
        event(f"refused: {type(refused).__name__}")
        return
    judges: list[tuple[str, Judge]] = [
        ("llguidance on the Lark", lambda text: lark_accepts(lark_text, text))
    ]
    try:
        gbnf = lark_to_gbnf(lark_text)
    except UnconvertibleGrammar as refused:
        event(f"not converted: {refused.construct.split(' at ')[0]}")
        gbnf = ""
    else:
        judges += [
            ("llguidance on the GBNF", lambda text: grammar_accepts(gbnf, text)),
            ("llama.cpp on the GBNF", _llama(gbnf)),
        ]
    try:
        texts = _texts(data, lark_text, seed)
    except TooAmbiguous:
        return
    for text in texts:
        if not _same_tables(text, lark_text):
            event("a character newer than Python's Unicode tables: not judged")
            continue
        try:
            miss = _judge_all(grammar, text, judges, f"{lark_text}\n{gbnf}")
        except TooAmbiguous:
            return
        prefix = miss is None or miss.at_end
        assert lark_accepts_prefix(lark_text, text) == prefix, (
            f"llguidance and the client disagree on whether {text!r} is a prefix "
            f"(client miss: {miss}) for\n{lark_text}"
        )


@FUZZ
@given(gbnf_grammars(), st.integers(0, 2**32 - 1), st.data())
def test_gbnf_grammars_read_the_same_on_every_engine(
    gbnf: str, seed: int, data: st.DataObject
) -> None:
    try:
        grammar = Grammar("Fuzz", gbnf=gbnf)
    except InvalidGrammar as refused:
        # Not asked of llama.cpp: left recursion behind an item that can match nothing makes
        # its grammar engine loop, which is why the SDK refuses it before sending.
        event(f"refused: {getattr(refused, 'construct', type(refused).__name__)}")
        return
    lark_text = gbnf_to_lark(gbnf)
    judges: list[tuple[str, Judge]] = [
        ("llama.cpp", _llama(to_gbnf(grammar))),
        ("llguidance on the converted Lark", lambda text: lark_accepts(lark_text, text)),
    ]
    try:
        for text in _texts(data, lark_text, seed):
            _judge_all(grammar, text, judges, f"{gbnf}\n{lark_text}")
    except TooAmbiguous:
        return
