"""`Grammar`: a grammar contract, the value type every other grammar module works on.

A grammar contract is to text what a `Contract` is to JSON: a name, a version, the grammar (Lark,
or GBNF converted to Lark), and optional checks that run on the recognized text. Its fingerprint
depends on content only (name, version, syntax and definition), so it is locked and checked by
`sdk schema lock`/`check` like a contract's schema, and a changed grammar is a reviewed change.

Checks are code, like a contract's validators, and are not part of the fingerprint.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Callable
from collections.abc import Mapping
from collections.abc import Sequence
from dataclasses import dataclass
from dataclasses import field
from typing import Any
from typing import Literal

from sdk.grammar._errors import InvalidGrammar
from sdk.grammar._errors import UnconvertibleGrammar
from sdk.schema.canonical import SchemaInfo

__all__ = [
    "GRAMMAR_SUFFIXES",
    "Grammar",
    "GrammarCheck",
    "GrammarSyntax",
    "InvalidGrammar",
    "UnconvertibleGrammar",
    "grammar_fingerprint",
]

GrammarSyntax = Literal["lark", "gbnf"]

GrammarCheck = Callable[[str, Mapping[str, Any]], object]
"""A check on recognized text: `check(text, context)`; it fails by raising (ValueError, say).

`context` holds `source` (the source document of the call, or None) and whatever the caller
passed as `context=`. The return value is ignored.
"""

GRAMMAR_SUFFIXES: dict[GrammarSyntax, str] = {"lark": ".lark", "gbnf": ".gbnf"}
"""File suffix of each syntax: snapshots and `sdk grammar test path.lark` use them."""

_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")


@dataclass(frozen=True, eq=False)
class Grammar:
    """A grammar contract: name, version, grammar text (Lark or GBNF) and optional checks.

        SELECT_ONLY = Grammar("SelectOnly", lark='start: "SELECT " ...', version=1)

    Give exactly one of `lark` (the syntax llguidance and OpenAI's custom tools take, and the
    one the client recognizes with) or `gbnf` (llama.cpp's, converted to Lark here; a construct
    that cannot be converted raises `UnconvertibleGrammar` naming it). The Lark grammar's entry
    rule is `start`; GBNF's `root` becomes `start`.

    `checks` run, in order, on text the grammar accepted (`check(text, context)`, failing by
    raising); every failure is reported together as `CheckFailed`.
    """

    name: str
    lark: str = field(default="")
    gbnf: str | None = None
    version: int = 1
    checks: Sequence[GrammarCheck] = ()
    description: str | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not _NAME.match(self.name):
            raise ValueError(
                f"a grammar name is a Python-style identifier (it names snapshot files and "
                f"provider tools), not {self.name!r}"
            )
        if isinstance(self.version, bool) or not isinstance(self.version, int) or self.version < 1:
            raise ValueError(f"a grammar version is an integer >= 1, not {self.version!r}")
        if self.gbnf is not None and self.lark:
            raise ValueError("give the grammar as lark= or as gbnf=, not both")
        if self.gbnf is None:
            if not isinstance(self.lark, str) or not self.lark.strip():
                raise ValueError(f"grammar {self.name} has no text: pass lark=... or gbnf=...")
        else:
            if not isinstance(self.gbnf, str) or not self.gbnf.strip():
                raise ValueError(f"grammar {self.name} has an empty gbnf= text")
            from sdk.grammar._gbnf_to_lark import gbnf_to_lark

            object.__setattr__(self, "lark", gbnf_to_lark(self.gbnf))
        object.__setattr__(self, "checks", tuple(self.checks))
        for check in self.checks:
            if not callable(check):
                raise TypeError(f"grammar {self.name}: check {check!r} is not callable")
        from sdk.grammar._compiled import compile_grammar  # lark: loaded with the first grammar

        compile_grammar(self.lark)  # an invalid grammar fails here, where it is defined

    @property
    def syntax(self) -> GrammarSyntax:
        """The syntax the grammar was written in (what its snapshot and fingerprint hold)."""
        return "lark" if self.gbnf is None else "gbnf"

    @property
    def definition(self) -> str:
        """The grammar text as written: the Lark or the GBNF."""
        return self.lark if self.gbnf is None else self.gbnf

    def fingerprint(self) -> str:
        """sha256 hex of the grammar's content: name, version, syntax and definition."""
        return grammar_fingerprint(self.name, self.version, self.syntax, self.definition)

    def info(self) -> SchemaInfo:
        """Name, version and fingerprint: what a `Result` and the lock file carry."""
        return SchemaInfo(name=self.name, version=self.version, fingerprint=self.fingerprint())

    def __repr__(self) -> str:
        return f"Grammar({self.name!r}, version={self.version}, syntax={self.syntax!r})"


def grammar_fingerprint(name: str, version: int, syntax: str, definition: str) -> str:
    """The fingerprint of a grammar's content (also computed from a snapshot read back)."""
    content = {"definition": definition, "name": name, "syntax": syntax, "version": version}
    data = json.dumps(content, ensure_ascii=True, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(data.encode()).hexdigest()
