"""Canonical JSON Schema -> GBNF grammar for llama.cpp's `grammar` parameter.

    >>> from contracts import Decision
    >>> print(contract_gbnf(Decision))          # doctest: +SKIP
    root ::= "{" ws "\\"reasoning\\"" ws ":" ws string ws "," ws "\\"answer\\"" ...

Why our own converter rather than llama.cpp's `json_schema`: llama.cpp moves required properties
ahead of optional ones (an optional reasoning field then comes after the answer it should
precede), mishandles `\\d`/`\\w`/`\\s` in patterns, lets raw control characters into strings with
some converters, and silently ignores what it cannot express. This one:

- keeps the DECLARED property order, required and optional alike (an optional property keeps
  its position and may be left out; nothing but declared properties is ever generated);
- is exact or loud: every keyword it cannot express exactly is reported, all at once, in
  `UnsupportedSchema` with the JSON pointer of the keyword. The grammar may be *narrower* than
  the schema (it fixes one spelling where JSON allows several, see below) but never wider, so
  a document it admits always passes the parser's schema check;
- bounds whitespace: compact JSON, or (the default) at most one space or one newline plus up
  to `MAX_INDENT` spaces/tabs between tokens, so decoding cannot run away on whitespace;
- writes strings as strict JSON: no raw control characters (a raw newline inside a string is
  impossible), only valid escapes, `\\u` surrogates only as a high+low pair.

What the grammar supports (exactly, unless a narrowing is listed):

- `type` (one or a list), `enum`, `const` (enum/const values are checked against their sibling
  keywords with `jsonschema`, so an enum node is always exact; values are written in compact
  canonical JSON);
- objects: `properties`, `required`, `additionalProperties: false`; `additionalProperties`
  true or absent beside `properties` is narrowed to "declared properties only" (and
  `minProperties`/`maxProperties` there only when the required/declared counts imply them);
  an object without `properties` is a map (`additionalProperties` schema, `minProperties`,
  `maxProperties`);
- `anyOf` (union), `oneOf` when its alternatives are provably disjoint (different types,
  different constant values, or a shared required discriminator property), `allOf` with one
  element, local `$ref` (recursion included, as long as a cycle passes through an object or an
  array);
- arrays: `items`, `prefixItems`, `minItems`, `maxItems` (`uniqueItems: true` only when
  `maxItems <= 1`);
- strings: `minLength`, `maxLength` (counted in code points, escapes included), `pattern` (a
  regex subset, see `sdk.schema._regex`; a pattern beside length bounds only when the pattern
  already implies them), `format` `date`, `date-time`, `time`, `uuid`;
- integers: any `minimum`/`maximum`/`exclusiveMinimum`/`exclusiveMaximum`, expressed exactly as
  digit patterns;
- numbers: the same four bounds when their values are integers (e.g. `ge=0, le=1`).

Narrowings: schema-valid JSON the grammar does not produce. Most are a second spelling of a
value that keeps one spelling in the grammar; the digit caps and the regex dialect are the only
ones that leave values out.

- integers have at most `MAX_INTEGER_DIGITS` digits, fractions at most `MAX_FRACTION_DIGITS`,
  exponents at most `MAX_EXPONENT_DIGITS` (a runaway guard like the whitespace bound); `-0` is
  not produced for integers;
- a bounded number is written without exponent (`0.00001`, not `1e-05`) and without `-0`;
- enum/const values, object keys and pattern- or format-constrained strings are written in
  their canonical JSON form (characters raw, only `"`, `\\` and control characters escaped);
- patterns take the meaning ECMA-262 and Python's `re` agree on (`\\d` is `[0-9]`, `.` excludes
  every line terminator, a final `$` does not admit a trailing newline): see `sdk.schema._regex`;
- `date-time`/`time` use `T` and `Z` in upper case, 1 to 6 fraction digits, no leap second;
  `date` is an exact calendar date between 0001-01-01 and 9999-12-31.

Since the grammar is never wider than the schema, a complete generation under it always passes
the parser's schema step; the parser still runs every step (the stop reason above all: a cut
generation is a prefix of a valid document, not a valid document).

Raises `UnsupportedSchema` for: `multipleOf`, `not`, `if`/`then`/`else`, `patternProperties`,
`propertyNames`, `dependentRequired`, `dependentSchemas`, `contains`, `unevaluatedItems`,
`$dynamicRef`, non-local `$ref`, keywords beside `$ref`/`anyOf`/`oneOf` that would need an
intersection, non-integer bounds on `number`, unknown `format`s, regex features outside the
subset, unknown keywords (prefix annotations with `x-`), and schemas no value satisfies.
"""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING, Any
from weakref import WeakKeyDictionary

from sdk.schema.canonical import shared_schema
from sdk.schema.gbnf._compiler import Compiler
from sdk.schema.gbnf._errors import UnsupportedKeyword, UnsupportedSchema
from sdk.schema.gbnf._keywords import (
    MAX_EXPONENT_DIGITS,
    MAX_FRACTION_DIGITS,
    MAX_INDENT,
    MAX_INTEGER_DIGITS,
    Whitespace,
)

if TYPE_CHECKING:
    from sdk.contract import Contract

__all__ = [
    "MAX_EXPONENT_DIGITS",
    "MAX_FRACTION_DIGITS",
    "MAX_INDENT",
    "MAX_INTEGER_DIGITS",
    "UnsupportedKeyword",
    "UnsupportedSchema",
    "Whitespace",
    "contract_gbnf",
    "to_gbnf",
]


def to_gbnf(schema: dict[str, Any], *, whitespace: Whitespace = "bounded") -> str:
    """A GBNF grammar (llama.cpp syntax, start rule `root`) for the documents `schema` admits.

    Raises `UnsupportedSchema` listing every keyword it cannot express exactly.
    The schema is read, never changed.
    """
    if whitespace not in ("bounded", "compact"):
        raise ValueError(f"whitespace must be 'bounded' or 'compact', not {whitespace!r}")
    return Compiler(schema, whitespace).compile()


_contract_cache: WeakKeyDictionary[type[Contract], dict[str, str]] = WeakKeyDictionary()
_contract_lock = threading.Lock()  # WeakKeyDictionary is not safe to change from two threads


def contract_gbnf(contract: type[Contract], *, whitespace: Whitespace = "bounded") -> str:
    """`to_gbnf` of the contract's canonical schema, computed once per contract and mode."""
    with _contract_lock:
        grammar = _contract_cache.get(contract, {}).get(whitespace)
    if grammar is None:
        grammar = to_gbnf(shared_schema(contract), whitespace=whitespace)
        with _contract_lock:
            grammar = _contract_cache.setdefault(contract, {}).setdefault(whitespace, grammar)
    return grammar
