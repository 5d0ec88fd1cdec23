"""Grammar contracts: constrained output that is not JSON.

`Grammar` (name, version, Lark or GBNF text, optional checks), the grammar parser
`parse_grammar` (stop reason, then client-side recognition, then checks), the accept/reject
harness `check_cases`, conversions to what providers take (`to_gbnf`, `gbnf_to_lark`;
provider-shaped pieces in `sdk.grammar.wire`), and `lark_literal` for building grammars from
data. No I/O.
"""

from typing import TYPE_CHECKING

from sdk._lazy import lazy_names
from sdk._lazy import listed
from sdk.grammar._grammar import Grammar
from sdk.grammar._grammar import GrammarCheck
from sdk.grammar._grammar import GrammarSyntax
from sdk.grammar._grammar import InvalidGrammar
from sdk.grammar._grammar import UnconvertibleGrammar
from sdk.grammar._grammar import grammar_fingerprint

if TYPE_CHECKING:
    from sdk.grammar._compiled import lark_literal
    from sdk.grammar._gbnf_to_lark import gbnf_to_lark
    from sdk.grammar._lark_to_gbnf import lark_to_gbnf
    from sdk.grammar._lark_to_gbnf import to_gbnf
    from sdk.grammar._recognize import GrammarMiss
    from sdk.grammar._recognize import parse_grammar
    from sdk.grammar._recognize import recognize
    from sdk.grammar.harness import CaseFailure
    from sdk.grammar.harness import GrammarCaseReport
    from sdk.grammar.harness import check_cases
    from sdk.grammar.harness import parse_cases

# The compiler (lark), the converters, the recognizer and the harness load on first use: a
# `Grammar` is a value, and `import sdk` pays for none of them.
__getattr__ = lazy_names(
    __name__,
    {
        "lark_literal": "sdk.grammar._compiled",
        "gbnf_to_lark": "sdk.grammar._gbnf_to_lark",
        "lark_to_gbnf": "sdk.grammar._lark_to_gbnf",
        "to_gbnf": "sdk.grammar._lark_to_gbnf",
        "GrammarMiss": "sdk.grammar._recognize",
        "parse_grammar": "sdk.grammar._recognize",
        "recognize": "sdk.grammar._recognize",
        "CaseFailure": "sdk.grammar.harness",
        "GrammarCaseReport": "sdk.grammar.harness",
        "check_cases": "sdk.grammar.harness",
        "parse_cases": "sdk.grammar.harness",
    },
)
__dir__ = listed(globals())

__all__ = [
    "CaseFailure",
    "Grammar",
    "GrammarCaseReport",
    "GrammarCheck",
    "GrammarMiss",
    "GrammarSyntax",
    "InvalidGrammar",
    "UnconvertibleGrammar",
    "check_cases",
    "gbnf_to_lark",
    "grammar_fingerprint",
    "lark_literal",
    "lark_to_gbnf",
    "parse_cases",
    "parse_grammar",
    "recognize",
    "to_gbnf",
]
