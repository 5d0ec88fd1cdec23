"""Test helpers: does a GBNF grammar accept a text? Asked of llguidance, an independent recognizer.

The grammar goes through llguidance's own GBNF-to-Lark conversion (`llguidance.gbnf_to_lark`),
then its Rust parser decides. Text is fed as bytes through a byte-level vocabulary (one token per
byte value plus an end-of-sequence token), so acceptance is a property of the bytes alone and no
model tokenizer is involved.

llguidance API used (1.9.x): `LLTokenizer(TokenizerWrapper(obj))` where `obj` has `tokens`
(bytes per token id), `eos_token_id`, `bos_token_id`, `special_token_ids` and is callable to
tokenize; `LLMatcher.grammar_from_lark(lark)` -> grammar string; `LLMatcher.validate_grammar`
-> "" or an error; `LLMatcher(tokenizer, grammar)` never raises, errors are read with
`is_error()`/`get_error()`; `consume_tokens(ids)` -> False once a token is not allowed (the
matcher then stays in its error state); `is_accepting()` -> the grammar may end here.
"""

from __future__ import annotations

import functools
from typing import Any, ClassVar

import llguidance
from llguidance.gbnf_to_lark import gbnf_to_lark

__all__ = ["grammar_accepts", "grammar_accepts_prefix", "lark_accepts", "lark_of"]

_EOS = 256


class _ByteVocabulary:
    """A vocabulary of the 256 byte values, plus an empty end-of-sequence token."""

    tokens: ClassVar[list[bytes]] = [bytes([value]) for value in range(256)] + [b""]
    eos_token_id = _EOS
    bos_token_id = None
    special_token_ids: ClassVar[list[int]] = [_EOS]

    def __call__(self, text: bytes | str) -> list[int]:
        return list(text.encode() if isinstance(text, str) else text)


@functools.cache
def _tokenizer() -> Any:
    return llguidance.LLTokenizer(llguidance.TokenizerWrapper(_ByteVocabulary()))


def lark_of(gbnf: str) -> str:
    """llguidance's Lark translation of a GBNF grammar (raises if it cannot translate)."""
    return str(gbnf_to_lark(gbnf))


@functools.lru_cache(maxsize=256)
def _pristine(gbnf: str) -> Any:
    """A matcher at the start of the grammar, built once per grammar and copied per check."""
    return _pristine_lark(lark_of(gbnf))


@functools.lru_cache(maxsize=256)
def _pristine_lark(lark: str) -> Any:
    grammar = llguidance.LLMatcher.grammar_from_lark(lark)
    error = llguidance.LLMatcher.validate_grammar(grammar, _tokenizer())
    if error:
        raise AssertionError(f"llguidance rejects the grammar: {error}\n{lark}")
    matcher = llguidance.LLMatcher(_tokenizer(), grammar, log_level=0)
    if matcher.is_error():
        raise AssertionError(f"llguidance cannot start the grammar: {matcher.get_error()}")
    return matcher


def _consume(gbnf: str, text: str) -> Any | None:
    matcher = _pristine(gbnf).deep_copy()
    return matcher if matcher.consume_tokens(list(text.encode("utf-8"))) else None


def grammar_accepts(gbnf: str, text: str) -> bool:
    """Whether `text` is a complete sentence of the grammar."""
    matcher = _consume(gbnf, text)
    return matcher is not None and bool(matcher.is_accepting())


def grammar_accepts_prefix(gbnf: str, text: str) -> bool:
    """Whether `text` can be continued into a sentence of the grammar (a cut-off generation)."""
    return _consume(gbnf, text) is not None


def lark_accepts(lark: str, text: str) -> bool:
    """Whether `text` is a complete sentence of a Lark grammar, as llguidance reads Lark."""
    matcher = _pristine_lark(lark).deep_copy()
    return bool(matcher.consume_tokens(list(text.encode("utf-8")))) and bool(matcher.is_accepting())
