"""The grammar parser: text and a stop reason in, the text or a typed error out.

The order is the JSON parser's (`sdk.parsing.parser`), with recognition in place of steps 2-5:

1. stop reason, by the JSON parser's own step (`decide_stop`): a cut generation is a prefix of a
   sentence, never a sentence, even when the prefix happens to be one;
2. recognition against the grammar, on the client (`sdk.grammar._earley`, pure Python: never
   trust a server's mask, llama.cpp has shipped fail-open grammar bugs) -> `GrammarViolation`
   with the position, in characters, where the text leaves the language (its end, when the
   text is a proper prefix of a sentence);
3. the grammar's checks -> `CheckFailed` listing every failed check.

No I/O.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any
from typing import Unpack

from sdk._values.declared import check_keywords
from sdk._values.position import TextPosition
from sdk.errors import CheckFailed
from sdk.errors import GrammarViolation
from sdk.errors import Violation
from sdk.errors import summarize
from sdk.grammar._compiled import compile_grammar
from sdk.grammar._earley import Recognizer
from sdk.grammar._grammar import Grammar
from sdk.parsing.parser import Parsed
from sdk.parsing.parser import StopDetails
from sdk.parsing.parser import decide_stop
from sdk.parsing.parser import decoded
from sdk.parsing.parser import validators_context
from sdk.stop_reason import StopReason

__all__ = ["GrammarMiss", "parse_grammar", "recognize"]

_SHOWN_EXPECTED = 8
END_OF_TEXT = "the end of the text"
"""Listed in `GrammarMiss.expected` where the text could have ended instead."""
_SNIPPET = 24


@dataclass(frozen=True, slots=True)
class GrammarMiss:
    """Where a text leaves a grammar's language, and what the grammar allowed there."""

    position: int
    """Where the text leaves the language (0-based character index), to the terminal: the start
    of the first terminal that cannot match there, or the text's length when the text stops
    partway through a terminal or before the grammar allows it to end."""
    line: int
    column: int
    expected: tuple[str, ...]
    """The terminals the grammar allowed at the miss, written as in a Lark grammar."""
    at_end: bool
    """The text ended where the grammar needed more."""

    def describe(self, text: str) -> str:
        """One line: where, what was found, what was allowed."""
        allowed = ", ".join(self.expected[:_SHOWN_EXPECTED])
        if len(self.expected) > _SHOWN_EXPECTED:
            allowed += f", ... ({len(self.expected)} in all)"
        expected = f"; expected {allowed}" if allowed else ""
        if not self.expected and not self.at_end:
            expected = f"; expected {END_OF_TEXT}"
        where = TextPosition(self.position, self.line, self.column).by_index()
        if self.at_end:
            return f"the text ends at {where} before the grammar allows it to end{expected}"
        found = text[self.position : self.position + _SNIPPET]
        more = "..." if len(text) > self.position + _SNIPPET else ""
        return f"the text leaves the grammar at {where}: {found!r}{more}{expected}"


def recognize(grammar: Grammar, text: str) -> GrammarMiss | None:
    """None if `text` is a sentence of the grammar, else where and how it leaves it."""
    if not isinstance(text, str):
        raise TypeError(f"text must be str, not {type(text).__name__}")
    compiled = compile_grammar(grammar.lark)
    outcome = _recognizer(grammar.lark).run(text)
    if outcome.accepted:
        return None
    expected = tuple(sorted({compiled.terminals[name].shown for name in outcome.expected}))
    if outcome.could_end and not outcome.at_end:
        expected += (END_OF_TEXT,)
    where = TextPosition.of(text, outcome.position)
    return GrammarMiss(where.index, where.line, where.column, expected, at_end=outcome.at_end)


@functools.lru_cache(maxsize=128)
def _recognizer(lark_text: str) -> Recognizer:
    return Recognizer(compile_grammar(lark_text))


def parse_grammar(
    grammar: Grammar,
    text: str | bytes,
    *,
    stop_reason: StopReason | str,
    source: str | None = None,
    context: Mapping[str, Any] | None = None,
    **details: Unpack[StopDetails],
) -> Parsed[str]:
    """Decide whether `text` is a trustworthy sentence of `grammar`; raise a typed error if not.

    The stop reason first (`TruncatedOutput`, `RefusedOutput`, `UnexpectedStop`, exactly as
    `sdk.parse`, with the same `details`), then recognition (`GrammarViolation`, with
    `.position`), then the grammar's checks (`CheckFailed`), which receive
    `{"source": source, **context}`.
    """
    check_keywords(details, StopDetails, "parse_grammar()")
    if not isinstance(grammar, Grammar):
        raise TypeError(f"grammar must be an sdk.Grammar, not {type(grammar).__name__}")
    if not isinstance(text, str | bytes):
        raise TypeError(f"text must be str or bytes, not {type(text).__name__}")
    text, undecodable = decoded(text)
    stop, raw = decide_stop(text, stop_reason, details)
    fields: dict[str, Any] = {"text": text, "stop_reason": stop, "raw_stop_reason": raw}
    if undecodable is not None:
        where = TextPosition.undecodable(undecodable)
        message = f"output is not UTF-8: {undecodable.reason} at {where.by_index()}"
        raise _violation(message, message, where, fields) from undecodable
    miss = recognize(grammar, text)
    if miss is not None:
        described = miss.describe(text)
        message = f"output is not in the {grammar.name} grammar: {described}"
        raise _violation(message, described, miss, fields)
    _run_checks(grammar, text, validators_context(source, context), fields)
    return Parsed(value=text, stop_reason=stop, text=text, raw_stop_reason=raw)


def _violation(
    message: str, problem: str, where: TextPosition | GrammarMiss, fields: dict[str, Any]
) -> GrammarViolation:
    """`GrammarViolation` at `where`: the error's message, and the problem its one violation
    names."""
    position = where.index if isinstance(where, TextPosition) else where.position
    return GrammarViolation(
        message,
        position=position,
        line=where.line,
        column=where.column,
        violations=[Violation("", problem, "grammar")],
        **fields,
    )


def _run_checks(
    grammar: Grammar, text: str, context: dict[str, Any], fields: dict[str, Any]
) -> None:
    if not grammar.checks:
        return
    frozen = MappingProxyType(context)
    violations: list[Violation] = []
    first: BaseException | None = None
    for check in grammar.checks:
        name = getattr(check, "__name__", type(check).__name__)
        try:
            check(text, frozen)
        except (ValueError, AssertionError) as error:
            violations.append(Violation("", f"{name}: {error}", name))
            first = first or error
        except Exception as error:
            # A check that breaks is still a failed check on this text, never an untyped escape.
            violations.append(Violation("", f"{name}: {type(error).__name__}: {error}", name))
            first = first or error
    if violations:
        raise CheckFailed(
            summarize(f"{grammar.name} failed its checks", violations),
            violations=violations,
            **fields,
        ) from first
