"""Rules every grammar may use (strings, numbers, any value, whitespace), emitted when used."""

from __future__ import annotations

import re

from sdk.schema.gbnf._keywords import MAX_EXPONENT_DIGITS
from sdk.schema.gbnf._keywords import MAX_FRACTION_DIGITS
from sdk.schema.gbnf._keywords import MAX_INDENT
from sdk.schema.gbnf._keywords import MAX_INTEGER_DIGITS


def _fraction_nonzero() -> str:
    """A fraction with a non-zero digit and at most MAX_FRACTION_DIGITS digits: one alternative
    per count of leading zeros keeps the digit bound exact and the rule unambiguous."""
    options = []
    for zeros in range(MAX_FRACTION_DIGITS):
        rest = MAX_FRACTION_DIGITS - zeros - 1
        options.append(
            " ".join(
                part
                for part in (f'"{"0" * zeros}"' if zeros else "", "[1-9]", f"[0-9]{{0,{rest}}}")
                if part and part != "[0-9]{0,0}"
            )
        )
    return '"." ( ' + " | ".join(options) + " )"


# Shared rules, emitted when used. `root` is the start symbol; `start` is what llguidance's
# GBNF-to-Lark conversion renames `root` to, so no rule may be called that.
SHARED_RULES: dict[str, str] = {
    "hex": "[0-9a-fA-F]",
    # One JSON string character: anything raw except controls, quote and backslash, or an
    # escape; a \u escape of a surrogate only as a high+low pair (one code point, as
    # minLength/maxLength count it).
    "char": (
        r'[^"\\\x00-\x1F] | "\\" ( ["\\/bfnrt] | "u" ( [0-9a-cA-Ce-fE-F] hex hex hex'
        r' | [dD] [0-7] hex hex | [dD] [89abAB] hex hex "\\u" [dD] [c-fC-F] hex hex ) )'
    ),
    "string": r'"\"" char* "\""',
    "boolean": '"true" | "false"',
    "null": '"null"',
    "integer": f'"0" | "-"? [1-9] [0-9]{{0,{MAX_INTEGER_DIGITS - 1}}}',
    "number": (
        f'"-"? ( "0" | [1-9] [0-9]{{0,{MAX_INTEGER_DIGITS - 1}}} )'
        f' ( "." [0-9]{{1,{MAX_FRACTION_DIGITS}}} )?'
        f" ( [eE] [-+]? [0-9]{{1,{MAX_EXPONENT_DIGITS}}} )?"
    ),
    "frac": f'( "." [0-9]{{1,{MAX_FRACTION_DIGITS}}} )?',
    "frac-zero": f'( "." "0"{{1,{MAX_FRACTION_DIGITS}}} )?',
    "frac-nonzero": _fraction_nonzero(),
    "value": "object | array | string | number | boolean | null",
    "object": '"{" ws ( member ( ws "," ws member )* ws )? "}"',
    "member": 'string ws ":" ws value',
    "array": '"[" ws ( value ( ws "," ws value )* ws )? "]"',
    "ws": f'( " " | "\\n" [ \\t]{{0,{MAX_INDENT}}} )?',
}
RESERVED = frozenset({"root", "start", *SHARED_RULES})
# A GBNF literal or character class: skipped when looking for rule names in a body.
OPAQUE = re.compile(r'"(?:[^"\\]|\\.)*"|\[(?:[^\]\\]|\\.)*\]')
