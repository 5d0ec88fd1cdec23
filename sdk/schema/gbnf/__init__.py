"""Canonical JSON Schema -> GBNF grammar for llama.cpp's `grammar` parameter.

    >>> from contracts import Decision
    >>> print(contract_gbnf(Decision))          # doctest: +SKIP
    root ::= "{" ws "\\"reasoning\\"" ws ":" ws string ws "," ws "\\"answer\\"" ...

Why our own converter rather than llama.cpp's `json_schema`: llama.cpp moves required properties
ahead of optional ones (an optional reasoning field then comes after the answer it should
precede), mishandles `\\d`/`\\w`/`\\s` in patterns, lets raw control characters into strings with
some converters, and silently ignores what it cannot express. This one:

- keeps the DECLARED property order, required and optional alike (an optional property keeps
  its position and may be left out); members the schema allows beyond the declared ones
  (`additionalProperties`, `patternProperties`) come after them;
- is exact or loud: every keyword it cannot express exactly is reported, all at once, in
  `UnsupportedSchema` with the JSON pointer of the keyword. The grammar may be *narrower* than
  the schema (it fixes one spelling where JSON allows several, see below) but never wider, so
  a document it admits always passes the parser's schema check;
- bounds whitespace: compact JSON, or (the default) at most one space or one newline plus up
  to `MAX_INDENT` spaces/tabs between tokens, so decoding cannot run away on whitespace;
- writes strings as strict JSON: no raw control characters (a raw newline inside a string is
  impossible), only valid escapes, `\\u` surrogates only as a high+low pair;
- takes time and memory about linear in the schema's size (one walk; each `$ref` target, and
  each intersection of a target with the keywords beside it, compiled once).

What the grammar supports (exactly, unless a narrowing is listed):

- `type` (one or a list), `enum`, `const` (enum/const values are checked against their sibling
  keywords with `jsonschema`, one validator per document, so an enum node is always exact;
  values are written in compact canonical JSON);
- objects: `properties`, `required` (a required name `properties` does not declare gets the
  schema that covers it), `additionalProperties` (a schema, true or false), `patternProperties`
  (one pattern, or several with the same schema), `dependencies`/`dependentRequired`/
  `dependentSchemas` (up to 6 per object, each written as "absent, or present with what it
  needs"); `minProperties`/`maxProperties` beside `properties` only when the
  required/declared counts imply them or for "at least one property"; an object without
  `properties` is a map (with the count bounds);
- `allOf` (its members intersected keyword by keyword, see `_merge`), keywords beside `$ref`,
  `anyOf` or `oneOf` (intersected with the target / distributed over the branches; a branch
  proven empty is dropped), `anyOf` (union), `oneOf` (as a union when every pair of branches is
  provably disjoint: by type, by constant values, or, for objects, by a property both require
  with disjoint schemas or one requires and the other forbids; otherwise each branch minus the
  others, see `not`), `not` (written as its complement where a grammar can say it: types,
  missing required names, strings outside a set, a property's value outside its schema, and
  unions of those), local `$ref` (recursion included, as long as a cycle passes through an
  object or an array);
- arrays: `items`, `prefixItems`, `items` as a list with `additionalItems` (drafts 4 to
  2019-09), `minItems`, `maxItems` (`uniqueItems: true` only when `maxItems <= 1`);
- strings: `minLength`, `maxLength` (counted in code points, escapes included), `pattern` (a
  regex subset, see `sdk.schema._regex`), `format` `date`, `date-time`, `time`, `uuid`, `uri`,
  `uri-reference`, `email`, `hostname`, `ipv4`, `json-pointer`;
- integers: any `minimum`/`maximum`/`exclusiveMinimum`/`exclusiveMaximum` (draft 4's boolean
  `exclusiveMinimum`/`exclusiveMaximum` too), expressed exactly as digit patterns;
- numbers: the same four bounds when their values are integers (e.g. `ge=0, le=1`).

Keywords JSON Schema does not define (`id`, `self`, `_format`, `example`, vendor keywords) are
ignored, as validators ignore them; so is a `format` JSON Schema does not define (`money`).
Every keyword JSON Schema defines is either expressed or refused.

Narrowings: schema-valid JSON the grammar does not produce. Most are a second spelling of a
value that keeps one spelling in the grammar; the ones marked (*) leave values out.

- integers have at most `MAX_INTEGER_DIGITS` digits, fractions at most `MAX_FRACTION_DIGITS`,
  exponents at most `MAX_EXPONENT_DIGITS` (a runaway guard like the whitespace bound); `-0` is
  not produced for integers (*);
- a bounded number is written without exponent (`0.00001`, not `1e-05`) and without `-0`;
- enum/const values, object keys beside declared properties and pattern- or
  format-constrained strings are written in their canonical JSON form (characters raw, only
  `"`, `\\` and control characters escaped);
- patterns take the meaning ECMA-262 and Python's `re` agree on (`\\d` is `[0-9]`, `.` excludes
  every line terminator, a final `$` does not admit a trailing newline): see `sdk.schema._regex`
  (*);
- a pattern beside `minLength`/`maxLength` it does not imply has its repetitions capped and
  raised to fit the bounds (*): see `_lengths`;
- `date-time`/`time` use `T` and `Z` in upper case, 1 to 6 fraction digits, no leap second;
  `date` is an exact calendar date between 0001-01-01 and 9999-12-31; `uri` and
  `uri-reference` are RFC 3986 in ASCII without IP-literal hosts, `email` a dot-atom local part
  of at most 64 characters at a host name, `hostname` at most 4 labels of up to 60 characters
  whose last one starts with a letter (*);
- with `patternProperties`, keys matching no pattern are not produced (*), nor pattern keys at
  all when a pattern matches a declared name (they could repeat it) (*); members beyond the
  declared ones are not produced when a declared name contains a character JSON escapes (*);
- keywords beside `$ref` are intersected with its target whatever the draft (drafts 4 to 7
  ignore them) (*);
- `not` and an overlapping `oneOf` use a part of a complement where the whole is not
  expressible (`not: {type: integer}` leaves every number out) (*).

Since the grammar is never wider than the schema, a complete generation under it always passes
the parser's schema step; the parser still runs every step (the stop reason above all: a cut
generation is a prefix of a valid document, not a valid document).

Raises `UnsupportedSchema` for: `multipleOf`, a `not` or an overlapping `oneOf` when no part
of the complement is expressible, `if`/`then`/`else`, `propertyNames`, `contains`,
`unevaluatedItems`, `unevaluatedProperties` other than `false` (or inside an intersection),
`$dynamicRef`, draft 3 (its `$schema`, a boolean `required`, `extends`...), non-local `$ref`
(or one below a subschema with its own `$id`), intersections it cannot write (two different
`pattern`s, say), non-integer bounds on `number`, `format`s JSON Schema defines that are not
listed above, regex features outside the subset, and schemas no value satisfies.
"""

from __future__ import annotations

from typing import Any
from weakref import WeakKeyDictionary

from pydantic import BaseModel

from sdk import _fork
from sdk.schema.canonical import shared_schema
from sdk.schema.gbnf._compiler import Compiler
from sdk.schema.gbnf._errors import UnsupportedKeyword
from sdk.schema.gbnf._errors import UnsupportedSchema
from sdk.schema.gbnf._keywords import MAX_EXPONENT_DIGITS
from sdk.schema.gbnf._keywords import MAX_FRACTION_DIGITS
from sdk.schema.gbnf._keywords import MAX_INDENT
from sdk.schema.gbnf._keywords import MAX_INTEGER_DIGITS
from sdk.schema.gbnf._keywords import Whitespace

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


_contract_cache: WeakKeyDictionary[type[BaseModel], dict[str, str]] = WeakKeyDictionary()
_contract_lock = _fork.lock()  # WeakKeyDictionary is not safe to change from two threads


def contract_gbnf(contract: type[BaseModel], *, whitespace: Whitespace = "bounded") -> str:
    """`to_gbnf` of the contract's canonical schema, computed once per contract and mode."""
    with _contract_lock:
        grammar = _contract_cache.get(contract, {}).get(whitespace)
    if grammar is None:
        grammar = to_gbnf(shared_schema(contract), whitespace=whitespace)
        with _contract_lock:
            grammar = _contract_cache.setdefault(contract, {}).setdefault(whitespace, grammar)
    return grammar
