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

import json
import math
import re
import threading
import urllib.parse
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal
from weakref import WeakKeyDictionary

from sdk.schema import _regex as rx
from sdk.schema.canonical import escape_pointer, shared_schema

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

Whitespace = Literal["bounded", "compact"]
"""`bounded`: one space, or a newline and up to `MAX_INDENT` spaces/tabs, between tokens;
`compact`: no whitespace at all."""

MAX_INDENT = 16
MAX_INTEGER_DIGITS = 19  # enough for any 64-bit integer
MAX_FRACTION_DIGITS = 20  # enough for the shortest repr of any double written positionally >= 1e-4
MAX_EXPONENT_DIGITS = 3  # enough for any double

# llama.cpp turns a repetition bound above 2000 into "unbounded" (and rejects a minimum above
# 2000), so larger bounds are split into blocks: see `_Compiler.repeat`.
_MAX_REPEAT = 2000

# Keywords that never constrain a value: ignored.
_ANNOTATIONS = frozenset(
    {
        "$anchor", "$comment", "$dynamicAnchor", "$id", "$schema", "$vocabulary",
        "contentEncoding", "contentMediaType", "contentSchema", "default", "deprecated",
        "description", "discriminator", "examples", "readOnly", "title", "writeOnly",
    }
)  # fmt: skip
# Containers of subschemas that are reached through `$ref` only.
_CONTAINERS = frozenset({"$defs", "definitions"})
# Keywords the converter expresses (for some values: see the handlers).
_HANDLED = frozenset(
    {
        "type", "enum", "const", "$ref", "anyOf", "oneOf", "allOf",
        "properties", "required", "additionalProperties", "unevaluatedProperties",
        "minProperties", "maxProperties",
        "items", "prefixItems", "minItems", "maxItems", "uniqueItems",
        "minLength", "maxLength", "pattern", "format",
        "minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum",
    }
)  # fmt: skip
# Known constraint keywords a context-free grammar cannot express here, with the reason.
_UNSUPPORTED = {
    "multipleOf": "divisibility is not expressible as a grammar here",
    "not": "a complement is not expressible as a context-free grammar",
    "if": "conditional subschemas need an intersection",
    "then": "conditional subschemas need an intersection",
    "else": "conditional subschemas need an intersection",
    "patternProperties": "property names matched by pattern are not supported",
    "propertyNames": "constraints on property names are not supported",
    "dependentRequired": "dependencies between properties are not supported",
    "dependentSchemas": "dependencies between properties are not supported",
    "dependencies": "dependencies between properties are not supported",
    "contains": "`contains` needs counting across array items",
    "minContains": "`contains` needs counting across array items",
    "maxContains": "`contains` needs counting across array items",
    "unevaluatedItems": "unevaluated items are not supported",
    "$dynamicRef": "dynamic references are not supported",
    "$recursiveRef": "recursive references (draft 2019-09) are not supported",
}
_TYPES = ("null", "boolean", "object", "array", "number", "integer", "string")

# Calendar-exact date (0001-01-01 to 9999-12-31, Feb 29 only in leap years) and RFC 3339 time,
# written with `\d`, which `_regex` reads as [0-9].
_YEAR = r"(?:000[1-9]|00[1-9]\d|0[1-9]\d\d|[1-9]\d\d\d)"
_LEAP_YEAR = r"(?:\d\d(?:0[48]|[2468][048]|[13579][26])|(?:0[48]|[2468][048]|[13579][26])00)"
_MONTH_DAY = (
    r"(?:(?:0[13578]|1[02])-(?:0[1-9]|[12]\d|3[01])"
    r"|(?:0[469]|11)-(?:0[1-9]|[12]\d|30)"
    r"|02-(?:0[1-9]|1\d|2[0-8]))"
)
_DATE = rf"(?:{_YEAR}-{_MONTH_DAY}|{_LEAP_YEAR}-02-29)"
_TIME = r"(?:[01]\d|2[0-3]):[0-5]\d:[0-5]\d(?:\.\d{1,6})?(?:Z|[+-](?:[01]\d|2[0-3]):[0-5]\d)"
_HEX = "[0-9a-fA-F]"
_FORMATS = {
    "date": rf"^{_DATE}$",
    "date-time": rf"^{_DATE}T{_TIME}$",
    "time": rf"^{_TIME}$",
    "uuid": rf"^{_HEX}{{8}}-{_HEX}{{4}}-{_HEX}{{4}}-{_HEX}{{4}}-{_HEX}{{12}}$",
}

# Code points a JSON string never carries raw: control characters, quote and backslash.
_JSON_SPECIAL: rx.Ranges = ((0x00, 0x1F), (0x22, 0x22), (0x5C, 0x5C))
_SHORT_ESCAPES = {0x08: "b", 0x09: "t", 0x0A: "n", 0x0C: "f", 0x0D: "r"}


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
_SHARED_RULES: dict[str, str] = {
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
_RESERVED = frozenset({"root", "start", *_SHARED_RULES})
# A GBNF literal or character class: skipped when looking for rule names in a body.
_OPAQUE = re.compile(r'"(?:[^"\\]|\\.)*"|\[(?:[^\]\\]|\\.)*\]')


@dataclass(frozen=True, slots=True)
class UnsupportedKeyword:
    """One keyword the converter cannot express: where it is, which, and why."""

    pointer: str
    keyword: str
    reason: str

    def __str__(self) -> str:
        return f"{self.pointer or '/'}: {self.reason}"


class UnsupportedSchema(ValueError):
    """The schema uses keywords (or values) that no GBNF grammar from this converter expresses.

    `problems` lists every one of them, each with the JSON pointer of the keyword, so that a
    schema can be fixed in one pass; nothing is ever silently dropped.
    """

    def __init__(self, problems: Sequence[UnsupportedKeyword]) -> None:
        self.problems: tuple[UnsupportedKeyword, ...] = tuple(problems)
        listed = "\n".join(f"  {problem}" for problem in self.problems)
        super().__init__(f"schema cannot be expressed exactly as a GBNF grammar:\n{listed}")

    def __reduce__(self) -> tuple[type[UnsupportedSchema], tuple[tuple[UnsupportedKeyword, ...]]]:
        return type(self), (self.problems,)


def to_gbnf(schema: dict[str, Any], *, whitespace: Whitespace = "bounded") -> str:
    """A GBNF grammar (llama.cpp syntax, start rule `root`) for the documents `schema` admits.

    Raises `UnsupportedSchema` listing every keyword it cannot express exactly.
    The schema is read, never changed.
    """
    if whitespace not in ("bounded", "compact"):
        raise ValueError(f"whitespace must be 'bounded' or 'compact', not {whitespace!r}")
    return _Compiler(schema, whitespace).compile()


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


# --- GBNF text helpers ---------------------------------------------------------------------


def _literal(text: str) -> str:
    """A GBNF string literal matching `text` exactly."""
    out = []
    for char in text:
        point = ord(char)
        if char in '"\\':
            out.append("\\" + char)
        elif point < 0x20 or point == 0x7F:
            out.append(f"\\x{point:02X}")
        else:
            out.append(char)  # non-ASCII stays raw UTF-8: both parsers decode it
    return '"' + "".join(out) + '"'


def _class_char(point: int) -> str:
    # ASCII punctuation is written as \xHH inside classes: `-`, `]`, `^`, `\` are special to
    # GBNF, and llguidance copies classes into Rust regexes where `&&`, `~~`, `--` are too.
    if point < 0x80 and not chr(point).isalnum():
        return f"\\x{point:02X}"
    return chr(point)


def _char_class(ranges: rx.Ranges) -> str:
    """A GBNF character class for a non-empty set; negated when the set reaches U+10FFFF."""
    negate = ranges[-1][1] == rx.MAX_CODE_POINT and bool(rx.complement(ranges))
    shown = rx.complement(ranges) if negate else ranges
    items = []
    for lo, hi in shown:
        if lo == hi:
            items.append(_class_char(lo))
        elif hi == lo + 1:
            items.append(_class_char(lo) + _class_char(hi))
        else:
            items.append(f"{_class_char(lo)}-{_class_char(hi)}")
    return "[" + ("^" if negate else "") + "".join(items) + "]"


def _json_string(text: str) -> str:
    """`text` as a canonical JSON string: raw characters, short escapes, \\u00XX for controls."""
    out = ['"']
    for char in text:
        point = ord(char)
        if char in '"\\':
            out.append("\\" + char)
        elif point in _SHORT_ESCAPES:
            out.append("\\" + _SHORT_ESCAPES[point])
        elif point < 0x20 or 0xD800 <= point <= 0xDFFF:
            out.append(f"\\u{point:04x}")
        else:
            out.append(char)
    out.append('"')
    return "".join(out)


def _json_text(value: Any) -> str:
    """`value` as compact canonical JSON (the spelling enum/const literals are generated in)."""
    if isinstance(value, str):
        return _json_string(value)
    if value is None or isinstance(value, bool | int):
        return json.dumps(value)
    if isinstance(value, float):
        if not math.isfinite(value):
            raise ValueError(f"{value!r} is not a JSON number")
        return repr(value)
    if isinstance(value, list):
        return "[" + ",".join(_json_text(item) for item in value) + "]"
    if isinstance(value, dict):
        return "{" + ",".join(f"{_json_string(k)}:{_json_text(v)}" for k, v in value.items()) + "}"
    raise ValueError(f"{value!r} is not a JSON value")


def _slug(text: str) -> str:
    """A rule-name fragment: llama.cpp names are [a-zA-Z0-9-]; lower case avoids llguidance's
    camelCase renaming."""
    slug = re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-")
    return slug or "x"


def _is_atom(expr: str) -> bool:
    """Whether `expr` can take a repetition suffix as it is: a rule name, literal or class."""
    return bool(
        re.fullmatch(r"[a-z0-9-]+", expr)
        or re.fullmatch(r'"(?:[^"\\]|\\.)*"', expr)
        or re.fullmatch(r"\[(?:[^\]\\]|\\.)*\]", expr)
    )


def _join(*parts: str) -> str:
    return " ".join(part for part in parts if part)


# --- unsigned decimal ranges ---------------------------------------------------------------


def _digit_range(lo: int, hi: int) -> str:
    if lo == hi:
        return f'"{lo}"'
    return "[0-9]" if (lo, hi) == (0, 9) else f"[{lo}-{hi}]"


def _any_digits(count: int) -> list[str]:
    if count == 0:
        return []
    return ["[0-9]" if count == 1 else f"[0-9]{{{count}}}"]


def _same_length(lo: str, hi: str) -> list[list[str]]:
    """Sequences matching the digit strings from `lo` to `hi` (same length, lo <= hi)."""
    if not lo:
        return [[]]
    if lo[0] == hi[0]:
        return [[f'"{lo[0]}"', *rest] for rest in _same_length(lo[1:], hi[1:])]
    width = len(lo) - 1
    low_full = set(lo[1:]) <= {"0"}
    high_full = set(hi[1:]) <= {"9"}
    first = int(lo[0]) if low_full else int(lo[0]) + 1
    last = int(hi[0]) if high_full else int(hi[0]) - 1
    out: list[list[str]] = []
    if not low_full:
        out += [[f'"{lo[0]}"', *rest] for rest in _same_length(lo[1:], "9" * width)]
    if first <= last:
        out.append([_digit_range(first, last), *_any_digits(width)])
    if not high_full:
        out += [[f'"{hi[0]}"', *rest] for rest in _same_length("0" * width, hi[1:])]
    return out


def _merge_literals(atoms: list[str]) -> str:
    """Join atoms, fusing adjacent one-digit literals: `"1" "2" [0-9]` -> `"12" [0-9]`."""
    out: list[str] = []
    for atom in atoms:
        if out and atom.startswith('"') and out[-1].startswith('"'):
            out[-1] = out[-1][:-1] + atom[1:]
        else:
            out.append(atom)
    return " ".join(out)


def _uint_range(lo: int, hi: int | None) -> list[str]:
    """Alternatives matching canonical decimal integers (no leading zero) in [lo, hi].

    `hi` None means "up to the digit cap". Empty when the range is empty or beyond the cap.
    """
    cap = 10**MAX_INTEGER_DIGITS - 1
    hi = cap if hi is None else min(hi, cap)
    lo = max(lo, 0)
    if lo > hi:
        return []
    alts: list[str] = []
    if lo == 0:
        alts.append('"0"')
        lo = 1
        if lo > hi:
            return alts
    full_from: int | None = None  # first digit count of a run of fully covered lengths
    for width in range(len(str(lo)), len(str(hi)) + 1):
        start, end = max(lo, 10 ** (width - 1)), min(hi, 10**width - 1)
        if start == 10 ** (width - 1) and end == 10**width - 1:
            full_from = width if full_from is None else full_from
            continue
        if full_from is not None:
            alts.append(_full_widths(full_from, width - 1))
            full_from = None
        alts += [_merge_literals(seq) for seq in _same_length(str(start), str(end))]
    if full_from is not None:
        alts.append(_full_widths(full_from, len(str(hi))))
    return alts


def _full_widths(low: int, high: int) -> str:
    """Every integer with `low` to `high` digits."""
    if low == high:
        return _join("[1-9]", *_any_digits(low - 1))
    return f"[1-9] [0-9]{{{low - 1},{high - 1}}}"


# --- the compiler --------------------------------------------------------------------------

Bound = tuple[int, bool]  # (value, inclusive)


class _Compiler:
    """One conversion: walks the schema once, collecting rules and problems."""

    def __init__(self, root: dict[str, Any], whitespace: Whitespace) -> None:
        self.root = root
        self.ws = "ws" if whitespace == "bounded" else ""
        self.rules: dict[str, str] = {}  # name -> body, in definition order
        self.by_body: dict[str, str] = {}  # body -> name, to share identical rules
        self.pending: set[str] = set()  # names reserved (for $ref targets, root) not yet defined
        self.refs: dict[str, str] = {}  # JSON pointer of a $ref target -> its rule name
        self.problems: dict[tuple[str, str], UnsupportedKeyword] = {}

    # -- output --

    def compile(self) -> str:
        self.pending.add("root")
        expr = self.node(self.root, "", "root", frozenset())
        if "root" in self.pending:
            self.rules["root"] = expr
            self.pending.discard("root")
        if self.problems:
            raise UnsupportedSchema(list(self.problems.values()))
        used = self.used_shared_rules()
        lines = [f"root ::= {self.rules.pop('root')}"]
        lines += [f"{name} ::= {body}" for name, body in self.rules.items()]
        # Shared rules last, in a fixed order: the output is deterministic.
        lines += [f"{name} ::= {self.shared_body(name)}" for name in _SHARED_RULES if name in used]
        return "\n".join(lines) + "\n"

    def used_shared_rules(self) -> set[str]:
        """The shared rules the grammar refers to, directly or through other shared rules."""
        used: set[str] = set()
        bodies = list(self.rules.values())
        while bodies:
            for name in re.findall(r"[a-z][a-z0-9-]*", _OPAQUE.sub(" ", bodies.pop())):
                if name in _SHARED_RULES and name not in used:
                    used.add(name)
                    bodies.append(self.shared_body(name))
        return used

    def shared_body(self, name: str) -> str:
        body = _SHARED_RULES[name]
        if not self.ws:
            # Compact mode: the shared rules lose their `ws` references (no literal in them
            # contains a space, so splitting on spaces is safe).
            body = " ".join(token for token in body.split(" ") if token != "ws")
        return body

    def problem(self, pointer: str, keyword: str, reason: str) -> str:
        """Record a problem; return a placeholder so that the walk goes on to find the rest."""
        where = f"{pointer}/{escape_pointer(keyword)}" if keyword else pointer
        self.problems.setdefault((where, keyword), UnsupportedKeyword(where, keyword, reason))
        return '"?"'

    # -- rules --

    def shared(self, name: str) -> str:
        """The name of a shared rule (emitted at the end if anything refers to it)."""
        assert name in _SHARED_RULES, name
        return name

    def define(self, hint: str, body: str) -> str:
        """A rule with this body, named after `hint` (shared when an identical rule exists)."""
        if hint in self.pending:
            self.pending.discard(hint)
            self.rules[hint] = body
            return hint
        existing = self.by_body.get(body)
        if existing is not None:
            return existing
        name = self.unique(hint)
        self.rules[name] = body
        self.by_body[body] = name
        return name

    def unique(self, hint: str) -> str:
        base = hint
        name, counter = base, 1
        while name in self.rules or name in self.pending or name in _RESERVED:
            counter += 1
            name = f"{base}-{counter}"
        return name

    def atom(self, expr: str, hint: str) -> str:
        return expr if _is_atom(expr) else self.define(hint, expr)

    def alternatives(self, exprs: Sequence[str], hint: str) -> str:
        unique = list(dict.fromkeys(exprs))
        if len(unique) == 1:
            return unique[0]
        if len(unique) <= 3 and all(re.fullmatch(r"[a-z][a-z0-9-]*", e) for e in unique):
            # A union of named rules reads best under its content: `string-or-null`.
            hint = "-or-".join(unique)
        return self.define(hint, " | ".join(unique))

    def repeat(self, expr: str, lo: int, hi: int | None, hint: str) -> str:
        """`expr` repeated lo..hi times, within llama.cpp's bound of 2000 per repetition."""
        if hi == 0:
            return ""
        unit = self.atom(expr, hint)
        if lo > _MAX_REPEAT or (hi is not None and hi > _MAX_REPEAT):
            # Exactly `lo` as whole blocks of _MAX_REPEAT plus a remainder, then up to hi - lo
            # more (see `up_to`).
            blocks, rest = divmod(lo, _MAX_REPEAT)
            block = self.define(f"{hint}-block", f"{unit}{{{_MAX_REPEAT}}}")
            parts = [self.repeat(block, blocks, blocks, f"{hint}-blocks")]
            parts.append(self.repeat(unit, rest, rest, hint))
            parts.append(f"{unit}*" if hi is None else self.up_to(unit, block, hi - lo, hint))
            return _join(*parts)
        if (lo, hi) == (1, 1):
            return unit
        if (lo, hi) == (0, 1):
            return f"{unit}?"
        if hi is None:
            return f"{unit}*" if lo == 0 else f"{unit}+" if lo == 1 else f"{unit}{{{lo},}}"
        return f"{unit}{{{lo}}}" if lo == hi else f"{unit}{{{lo},{hi}}}"

    def up_to(self, unit: str, block: str, count: int, hint: str) -> str:
        """`unit` 0..count times for a large count: a full block and up to count - block more,
        or fewer than a block. Recursion depth count / 2000; the two options never overlap."""
        if count <= _MAX_REPEAT:
            return self.repeat(unit, 0, count, hint)
        more = self.up_to(unit, block, count - _MAX_REPEAT, hint)
        fewer = f"{unit}{{0,{_MAX_REPEAT - 1}}}"
        return self.define(f"{hint}-up-to-{count}", f"{block} {more} | {fewer}")

    # -- schema nodes --

    def node(self, node: Any, pointer: str, hint: str, guard: frozenset[str]) -> str:
        """A GBNF term (usable in a sequence) for the values `node` admits.

        `guard` holds the `$ref` targets entered since the last consumed `{` or `[`: meeting
        one again would be left recursion, which llama.cpp rejects.
        """
        if node is True:
            return self.any_value()
        if node is False:
            return self.problem(pointer, "", "the schema `false` admits no value")
        if not isinstance(node, dict):
            return self.problem(pointer, "", "a schema must be an object or a boolean")
        keys = self.check_keywords(node, pointer, enumerated="enum" in node or "const" in node)
        if "enum" in keys or "const" in keys:
            return self.enum(node, pointer, hint)
        if "$ref" in keys:
            for keyword in sorted(keys - {"$ref"}):
                self.problem(pointer, keyword, f"`{keyword}` beside `$ref` needs an intersection")
            return self.ref(node["$ref"], pointer, hint, guard)
        if "allOf" in keys:
            parts = node["allOf"]
            if keys != {"allOf"} or not isinstance(parts, list) or len(parts) != 1:
                return self.problem(pointer, "allOf", "`allOf` needs an intersection")
            return self.node(parts[0], f"{pointer}/allOf/0", hint, guard)
        for keyword in ("anyOf", "oneOf"):
            if keyword in keys:
                return self.union(node, keyword, keys, pointer, hint, guard)
        types = self.types(node, pointer, keys)
        if not types:
            return '"?"'
        terms = [
            self.typed(node, kind, pointer, hint if len(types) == 1 else f"{hint}-{kind}")
            for kind in types
        ]
        return self.alternatives(terms, hint)

    def check_keywords(self, node: dict[str, Any], pointer: str, *, enumerated: bool) -> set[str]:
        """The node's constraint keywords; unknown and unsupported ones are recorded.

        Beside `enum`/`const` every known keyword is fine: the listed values are filtered
        through it (see `filter_values`), which is exact.
        """
        keys: set[str] = set()
        for keyword in node:
            if keyword in _ANNOTATIONS or keyword in _CONTAINERS or keyword.startswith("x-"):
                continue
            if keyword in _UNSUPPORTED and enumerated:
                keys.add(keyword)
            elif keyword in _UNSUPPORTED:
                self.problem(pointer, keyword, _UNSUPPORTED[keyword])
            elif keyword not in _HANDLED:
                self.problem(
                    pointer,
                    keyword,
                    f"unknown keyword `{keyword}` (an annotation should start with `x-`)",
                )
            else:
                keys.add(keyword)
        return keys

    def types(self, node: dict[str, Any], pointer: str, keys: set[str]) -> list[str]:
        declared = node.get("type")
        if declared is None:
            if not keys:
                return ["any"]
            # Type-specific keywords without a type: every type, each with its own keywords.
            return ["null", "boolean", "object", "array", "number", "string"]
        names = declared if isinstance(declared, list) else [declared]
        if not names or not all(isinstance(n, str) and n in _TYPES for n in names):
            self.problem(pointer, "type", f"invalid type {declared!r}")
            return []
        ordered = list(dict.fromkeys(names))
        if "number" in ordered and "integer" in ordered:
            ordered.remove("integer")  # every integer is a number
        return ordered

    def typed(self, node: dict[str, Any], kind: str, pointer: str, hint: str) -> str:
        if kind == "any":
            return self.any_value()
        if kind == "null":
            return self.shared("null")
        if kind == "boolean":
            return self.shared("boolean")
        if kind == "string":
            return self.string(node, pointer, hint)
        if kind == "integer":
            return self.integer(node, pointer, hint)
        if kind == "number":
            return self.number(node, pointer, hint)
        if kind == "array":
            return self.array(node, pointer, hint)
        return self.object(node, pointer, hint)

    def any_value(self) -> str:
        return self.shared("value")

    # -- enum, const --

    def enum(self, node: dict[str, Any], pointer: str, hint: str) -> str:
        source = "enum" if "enum" in node else "const"
        values = node["enum"] if source == "enum" else [node["const"]]
        if not isinstance(values, list) or not values:
            return self.problem(pointer, source, "`enum` must be a non-empty list")
        siblings = {
            key: value
            for key, value in node.items()
            if key != source and key not in _ANNOTATIONS and key not in _CONTAINERS
            if not key.startswith("x-")
        }
        if set(siblings) == {"type"} and isinstance(siblings["type"], str):
            # The common case (`{"type": "string", "enum": [...]}`) needs no validator.
            values = [v for v in values if _has_type(v, siblings["type"])]
        elif siblings:
            kept = self.filter_values(values, siblings, pointer, source)
            if kept is None:
                return '"?"'
            values = kept
        try:
            texts = list(dict.fromkeys(_json_text(value) for value in values))
        except ValueError as error:
            return self.problem(pointer, source, str(error))
        if not texts:
            return self.problem(pointer, source, "no listed value satisfies the other keywords")
        return self.alternatives([_literal(text) for text in texts], hint)

    def filter_values(
        self, values: list[Any], siblings: dict[str, Any], pointer: str, source: str
    ) -> list[Any] | None:
        """The values that also satisfy the sibling keywords: exact, because finite."""
        # The core's validator; imported here because only enum nodes with siblings need it.
        import jsonschema
        import referencing.exceptions

        schema = dict(siblings)
        for container in _CONTAINERS:
            if container in self.root and container not in schema:
                schema[container] = self.root[container]
        try:
            jsonschema.Draft202012Validator.check_schema(schema)
            validator = jsonschema.Draft202012Validator(
                schema, format_checker=jsonschema.Draft202012Validator.FORMAT_CHECKER
            )
            return [value for value in values if validator.is_valid(value)]
        except (jsonschema.exceptions.SchemaError, referencing.exceptions.Unresolvable) as error:
            self.problem(pointer, source, f"cannot check the values against the siblings: {error}")
            return None

    # -- references and unions --

    def ref(self, ref: Any, pointer: str, hint: str, guard: frozenset[str]) -> str:
        if not isinstance(ref, str) or not ref.startswith("#"):
            return self.problem(pointer, "$ref", f"only local references are supported: {ref!r}")
        target_pointer = urllib.parse.unquote(ref[1:])
        target = self.resolve(target_pointer)
        if target is None:
            return self.problem(pointer, "$ref", f"cannot resolve {ref!r}")
        if target_pointer in guard:
            return self.problem(
                pointer, "$ref", f"{ref!r} reaches itself without reading input (left recursion)"
            )
        name = self.refs.get(target_pointer)
        if name is not None:
            return name
        last = target_pointer.rsplit("/", 1)[-1]
        name = self.unique(_slug(last) if target_pointer else "document")
        self.refs[target_pointer] = name
        self.pending.add(name)
        expr = self.node(target, target_pointer, name, guard | {target_pointer})
        if name in self.pending:  # the body was an inline term, not a rule of its own
            self.pending.discard(name)
            self.rules[name] = expr
        return name

    def resolve(self, pointer: str) -> Any:
        current: Any = self.root
        if not pointer:
            return current
        if not pointer.startswith("/"):
            return None
        for token in pointer[1:].split("/"):
            token = token.replace("~1", "/").replace("~0", "~")
            if isinstance(current, dict) and token in current:
                current = current[token]
            elif isinstance(current, list) and token.isdigit() and int(token) < len(current):
                current = current[int(token)]
            else:
                return None
        return current

    def union(
        self,
        node: dict[str, Any],
        keyword: str,
        keys: set[str],
        pointer: str,
        hint: str,
        guard: frozenset[str],
    ) -> str:
        for other in sorted(keys - {keyword}):
            self.problem(pointer, other, f"`{other}` beside `{keyword}` needs an intersection")
        options = node[keyword]
        if not isinstance(options, list) or not options:
            return self.problem(pointer, keyword, f"`{keyword}` must be a non-empty list")
        if keyword == "oneOf" and not self.disjoint(options):
            self.problem(
                pointer,
                keyword,
                "`oneOf` alternatives that may overlap (use anyOf, or make them disjoint by type"
                " or by a const discriminator)",
            )
        terms = []
        for index, option in enumerate(options):
            kind = option.get("type") if isinstance(option, dict) else None
            # Name an alternative after its type where it has one: `price-number`.
            option_hint = f"{hint}-{kind}" if isinstance(kind, str) else f"{hint}-{index + 1}"
            terms.append(self.node(option, f"{pointer}/{keyword}/{index}", option_hint, guard))
        return self.alternatives(terms, hint)

    def disjoint(self, options: list[Any]) -> bool:
        """Whether no value can match two of the options (so oneOf == anyOf)."""
        kinds = [self.kinds(option, 0) for option in options]
        if all(k is not None for k in kinds):
            seen: set[str] = set()
            for kind in kinds:
                assert kind is not None
                if kind & seen:
                    break
                seen |= kind
            else:
                return True
        constants = [self.constants(option) for option in options]
        if all(c is not None for c in constants):
            flat = [text for group in constants if group is not None for text in group]
            if len(flat) == len(set(flat)):
                return True
        return self.discriminated(options)

    def deref(self, node: Any, depth: int) -> Any:
        while isinstance(node, dict) and isinstance(node.get("$ref"), str) and depth < 32:
            target = self.resolve(urllib.parse.unquote(node["$ref"][1:]))
            if target is None:
                return None
            node, depth = target, depth + 1
        return node

    def kinds(self, node: Any, depth: int) -> set[str] | None:
        """The JSON types a node can produce (integer counted as number), None if unknown."""
        node = self.deref(node, depth)
        if not isinstance(node, dict):
            return None
        if "const" in node or "enum" in node:
            values = node.get("enum", [node.get("const")])
            return {_json_kind(v) for v in values} if isinstance(values, list) else None
        for keyword in ("anyOf", "oneOf"):
            if isinstance(node.get(keyword), list):
                found: set[str] = set()
                for option in node[keyword]:
                    kind = self.kinds(option, depth + 1)
                    if kind is None:
                        return None
                    found |= kind
                return found
        declared = node.get("type")
        if declared is None:
            return None
        names = declared if isinstance(declared, list) else [declared]
        return {"number" if name == "integer" else str(name) for name in names}

    def constants(self, node: Any) -> list[str] | None:
        node = self.deref(node, 0)
        if not isinstance(node, dict):
            return None
        if "const" in node:
            values = [node["const"]]
        elif isinstance(node.get("enum"), list):
            values = node["enum"]
        else:
            return None
        try:
            return [json.dumps(v, sort_keys=True) for v in values]
        except (TypeError, ValueError):
            return None

    def discriminated(self, options: list[Any]) -> bool:
        """All options are objects sharing a required property with disjoint constant values."""
        objects = [self.deref(option, 0) for option in options]
        if not all(isinstance(o, dict) and isinstance(o.get("properties"), dict) for o in objects):
            return False
        shared = set.intersection(*(set(o.get("required", [])) for o in objects))
        for name in sorted(shared):
            groups = [self.constants(o["properties"].get(name)) for o in objects]
            if all(g is not None for g in groups):
                flat = [text for group in groups if group is not None for text in group]
                if len(flat) == len(set(flat)):
                    return True
        return False

    # -- strings --

    def string(self, node: dict[str, Any], pointer: str, hint: str) -> str:
        min_len = self.count(node, "minLength", pointer)
        max_len = self.limit(node, "maxLength", pointer)
        pattern, fmt = node.get("pattern"), node.get("format")
        regex: str | None = None
        regex_keyword = "pattern"
        if fmt is not None:
            if pattern is not None:
                return self.problem(pointer, "format", "`format` beside `pattern`")
            if fmt not in _FORMATS:
                known = ", ".join(_FORMATS)
                return self.problem(pointer, "format", f"format {fmt!r} (supported: {known})")
            regex, regex_keyword = _FORMATS[fmt], "format"
        elif pattern is not None:
            if not isinstance(pattern, str):
                return self.problem(pointer, "pattern", "`pattern` must be a string")
            regex = pattern
        if regex is not None:
            return self.pattern(regex, regex_keyword, min_len, max_len, pointer, hint)
        if max_len is not None and max_len < min_len:
            return self.problem(pointer, "maxLength", "maxLength below minLength: no value")
        quote = _literal('"')
        if (min_len, max_len) == (0, None):
            return self.shared("string")
        chars = self.repeat(self.shared("char"), min_len, max_len, f"{hint}-chars")
        return self.define(hint, _join(quote, chars, quote))

    def count(self, node: dict[str, Any], keyword: str, pointer: str) -> int:
        """A lower count (`minLength`, `minItems`, ...): 0 when absent."""
        return self.limit(node, keyword, pointer) or 0

    def limit(self, node: dict[str, Any], keyword: str, pointer: str) -> int | None:
        """An upper count (`maxLength`, `maxItems`, ...): None when absent."""
        value = node.get(keyword)
        if value is None:
            return None
        if isinstance(value, int) and not isinstance(value, bool) and value >= 0:
            return value
        if isinstance(value, float) and value.is_integer() and value >= 0:
            return int(value)
        self.problem(pointer, keyword, f"`{keyword}` must be a non-negative integer")
        return None

    def pattern(
        self,
        regex: str,
        keyword: str,
        min_len: int,
        max_len: int | None,
        pointer: str,
        hint: str,
    ) -> str:
        try:
            branches = rx.parse_pattern(regex)
            bodies = [self.branch(branch, hint) for branch in branches]
        except rx.RegexUnsupported as error:
            return self.problem(pointer, keyword, f"pattern not expressible: {error}")
        if min_len or max_len is not None:
            lows, highs = [], []
            for branch in branches:
                low, high = rx.length_range(branch.node)
                lows.append(low)
                free = not (branch.anchored_start and branch.anchored_end)
                highs.append(None if free else high)
            low = min(lows)
            high = None if None in highs else max(h for h in highs if h is not None)
            implied = min_len <= low and (max_len is None or (high is not None and high <= max_len))
            if not implied:
                which = "minLength" if min_len > low else "maxLength"
                return self.problem(
                    pointer,
                    which,
                    f"`{which}` beside `{keyword}` needs an intersection (the {keyword} does not"
                    " already imply the length bounds)",
                )
        quote = _literal('"')
        return self.alternatives([_join(quote, body, quote) for body in bodies], hint)

    def branch(self, branch: rx.Branch, hint: str) -> str:
        """One top-level regex alternative inside a JSON string; unanchored ends take any
        characters (JSON Schema patterns search, they do not match the whole string)."""
        free = f"{self.shared('char')}*"
        return _join(
            "" if branch.anchored_start else free,
            self.regex(branch.node, f"{hint}-pattern"),
            "" if branch.anchored_end else free,
        )

    def regex(self, node: rx.Node, hint: str) -> str:
        """A term for the JSON-encoded text of the strings `node` matches (may be empty)."""
        if isinstance(node, rx.CharSet):
            return self.json_chars(node.ranges, hint)
        if isinstance(node, rx.Seq):
            return _join(*(self.regex(item, hint) for item in node.items))
        if isinstance(node, rx.Alt):
            options = [self.regex(option, hint) for option in node.options]
            present = list(dict.fromkeys(o for o in options if o))
            if not present:
                return ""
            group = present[0] if len(present) == 1 else "( " + " | ".join(present) + " )"
            if len(present) < len(options):  # an empty option: the whole group is optional
                return f"{self.atom(group, hint)}?"
            return group
        inner = self.regex(node.node, hint)
        if not inner:
            return ""
        if node.hi is None and rx.length_range(node.node)[0] == 0:
            # x* with x able to match "" is left recursion for llama.cpp.
            raise rx.RegexUnsupported("unbounded repetition of something that can match ''")
        return self.repeat(inner, node.lo, node.hi, hint)

    def json_chars(self, ranges: rx.Ranges, hint: str) -> str:
        """One JSON string character whose decoded value is in `ranges`, canonically written:
        raw when JSON allows it, else the escape (`\\"`, `\\\\`, `\\n` or `\\u000a`, ...)."""
        raw = rx.subtract(ranges, _JSON_SPECIAL)
        parts = [_char_class(raw)] if raw else []
        inside = set()
        for lo, hi in ranges:
            for point in range(lo, min(hi, 0x5C) + 1):
                inside.add(point)
        if 0x22 in inside:
            parts.append(_literal('\\"'))
        if 0x5C in inside:
            parts.append(_literal("\\\\"))
        controls = sorted(p for p in inside if p < 0x20)
        if len(controls) == 0x20:
            hex_rule = self.shared("hex")
            parts.append(f'"\\\\" ( [bfnrt] | "u00" [01] {hex_rule} )')
        else:
            for point in controls:
                spelled = [_literal("\\u00" + f"{point:02x}"[0])]
                low = f"{point:02x}"[1]
                spelled.append(_literal(low) if low.isdigit() else f"[{low}{low.upper()}]")
                forms = [" ".join(spelled)]
                if point in _SHORT_ESCAPES:
                    forms.insert(0, _literal("\\" + _SHORT_ESCAPES[point]))
                parts.append(forms[0] if len(forms) == 1 else "( " + " | ".join(forms) + " )")
        if len(parts) == 1 and len(raw) == 1 and raw[0][0] == raw[0][1]:
            return _literal(chr(raw[0][0]))  # one plain character: `"-"` reads better than `[\x2D]`
        if len(parts) == 1 and _is_atom(parts[0]):
            return parts[0]
        return self.define(f"{hint}-char", " | ".join(parts))

    # -- numbers --

    def bounds(
        self, node: dict[str, Any], pointer: str, *, integer: bool
    ) -> tuple[Bound | None, Bound | None] | None:
        """(lower, upper), each (value, inclusive) or None; None after a recorded problem.

        Integer bounds are rounded inward (exact); number bounds must be integers.
        """
        lower: Bound | None = None
        upper: Bound | None = None
        ok = True
        for keyword in ("minimum", "exclusiveMinimum", "maximum", "exclusiveMaximum"):
            if keyword not in node:
                continue
            value = node[keyword]
            if isinstance(value, bool) or not isinstance(value, int | float):
                self.problem(pointer, keyword, f"`{keyword}` must be a number")
                ok = False
                continue
            if isinstance(value, float) and not math.isfinite(value):
                self.problem(pointer, keyword, f"`{keyword}` must be finite")
                ok = False
                continue
            exclusive = keyword.startswith("exclusive")
            is_lower = keyword.endswith("inimum")
            if integer:
                # For integers every bound is an inclusive integer bound.
                if is_lower:
                    bound = (math.floor(value) + 1 if exclusive else math.ceil(value), True)
                else:
                    bound = (math.ceil(value) - 1 if exclusive else math.floor(value), True)
            elif float(value).is_integer():
                bound = (int(value), not exclusive)
            else:
                self.problem(
                    pointer,
                    keyword,
                    f"a non-integer `{keyword}` ({value!r}) on a number is not expressible",
                )
                ok = False
                continue
            if is_lower:
                lower = bound if lower is None else _tighter(lower, bound, lower=True)
            else:
                upper = bound if upper is None else _tighter(upper, bound, lower=False)
        return (lower, upper) if ok else None

    def integer(self, node: dict[str, Any], pointer: str, hint: str) -> str:
        found = self.bounds(node, pointer, integer=True)
        if found is None:
            return '"?"'
        lower, upper = found
        if lower is None and upper is None:
            return self.shared("integer")
        lo = None if lower is None else lower[0]
        hi = None if upper is None else upper[0]
        alts: list[str] = []
        if hi is None or hi >= 0:
            alts += _uint_range(0 if lo is None else max(lo, 0), hi)
        if lo is None or lo < 0:
            magnitude_lo = 1 if hi is None or hi >= -1 else -hi
            alts += [f'"-" {alt}' for alt in _uint_range(magnitude_lo, None if lo is None else -lo)]
        if not alts:
            return self.problem(
                pointer, "minimum" if lower else "maximum", "no integer satisfies the bounds"
            )
        return self.alternatives(alts, hint)

    def number(self, node: dict[str, Any], pointer: str, hint: str) -> str:
        found = self.bounds(node, pointer, integer=False)
        if found is None:
            return '"?"'
        lower, upper = found
        if lower is None and upper is None:
            return self.shared("number")
        alts = self.decimals(lower, upper)
        # Negative values: "-" and a magnitude m > 0 with the bounds mirrored.
        if lower is None or lower[0] < 0:
            m_lower: Bound = (0, False)
            if upper is not None and -upper[0] > 0:
                m_lower = (-upper[0], upper[1])
            m_upper = None if lower is None else (-lower[0], lower[1])
            alts += [f'"-" {alt}' for alt in self.decimals(m_lower, m_upper)]
        if not alts:
            return self.problem(
                pointer, "minimum" if lower else "maximum", "no number satisfies the bounds"
            )
        return self.alternatives(alts, hint)

    def decimals(self, lower: Bound | None, upper: Bound | None) -> list[str]:
        """Unsigned decimals (no exponent) within integer bounds; lower defaults to >= 0.

        A written value I.F lies in [I, I+1): every fraction is allowed for I from the lower
        bound to upper-1; at an exclusive lower bound I == lo needs a non-zero fraction; at an
        inclusive upper bound I == hi needs a zero (or no) fraction.
        """
        lo, lo_inclusive = lower if lower is not None else (0, True)
        first = max(lo if lo_inclusive else lo + 1, 0)
        last = None if upper is None else upper[0] - 1
        alts: list[str] = []
        if last is None or first <= last:
            frac = self.shared("frac")
            alts += [f"{alt} {frac}" for alt in _uint_range(first, last)]
        if not lo_inclusive and lo >= 0 and (upper is None or lo + 1 <= upper[0]):
            frac = self.shared("frac-nonzero")
            alts += [f"{alt} {frac}" for alt in _uint_range(lo, lo)]
        if upper is not None and upper[1] and upper[0] >= 0:
            hi = upper[0]
            if hi > lo or (hi == lo and lo_inclusive):
                frac = self.shared("frac-zero")
                alts += [f"{alt} {frac}" for alt in _uint_range(hi, hi)]
        return alts

    # -- arrays --

    def array(self, node: dict[str, Any], pointer: str, hint: str) -> str:
        min_items = self.count(node, "minItems", pointer)
        max_items = self.limit(node, "maxItems", pointer)
        items = node.get("items", True)
        prefix = node.get("prefixItems", [])
        if not isinstance(prefix, list):
            return self.problem(pointer, "prefixItems", "`prefixItems` must be a list")
        if items is False:
            max_items = len(prefix) if max_items is None else min(max_items, len(prefix))
        if node.get("uniqueItems") is True and (max_items is None or max_items > 1):
            self.problem(pointer, "uniqueItems", "uniqueness across items is not expressible")
        if max_items is not None and max_items < min_items:
            return self.problem(pointer, "maxItems", "maxItems below minItems: no value")
        open_, close = _literal("["), _literal("]")
        if max_items == 0:
            return self.define(hint, _join(open_, self.ws, close))
        fresh: frozenset[str] = frozenset()  # "[" was read: recursion below is not left
        elements = [
            self.node(p, f"{pointer}/prefixItems/{i}", f"{hint}-{i + 1}", fresh)
            for i, p in enumerate(prefix)
        ]
        item = "" if items is False else self.node(items, f"{pointer}/items", f"{hint}-item", fresh)
        comma = _join(self.ws, _literal(","), self.ws)

        def after(count: int) -> str:
            """What may follow once `count` (>= 1) items were written."""
            if max_items is not None and count >= max_items:
                return ""
            if count < len(elements):
                rest = _join(comma, elements[count], after(count + 1))
                if count >= min_items:
                    return f"{self.define(f'{hint}-from-{count + 1}', rest)}?"
                return rest
            lo = max(min_items - count, 0)
            hi = None if max_items is None else max_items - count
            more = self.define(f"{hint}-more", _join(comma, item))
            return self.repeat(more, lo, hi, f"{hint}-more")

        content = _join(elements[0] if elements else item, after(1))
        if min_items == 0:
            body = _join(open_, self.ws, f"( {_join(content, self.ws)} )?", close)
        else:
            body = _join(open_, self.ws, content, self.ws, close)
        return self.define(hint, body)

    # -- objects --

    def object(self, node: dict[str, Any], pointer: str, hint: str) -> str:
        properties = node.get("properties", {})
        if not isinstance(properties, dict):
            return self.problem(pointer, "properties", "`properties` must be an object")
        additional = node.get("additionalProperties", True)
        if node.get("unevaluatedProperties", False) is not False:
            self.problem(pointer, "unevaluatedProperties", "only `false` is supported")
        required = node.get("required", [])
        if not isinstance(required, list):
            return self.problem(pointer, "required", "`required` must be a list")
        if not properties:
            if required:
                self.problem(pointer, "required", "`required` without `properties`")
            return self.mapping(node, additional, pointer, hint)
        for name in required:
            if name not in properties:
                self.problem(
                    pointer,
                    "required",
                    f"required property {name!r} is not in `properties` (only declared"
                    " properties are generated)",
                )
        if isinstance(additional, dict) and additional:
            self.problem(
                pointer,
                "additionalProperties",
                "an `additionalProperties` schema beside `properties` is not supported",
            )
        count_required = sum(1 for name in properties if name in required)
        min_props = self.count(node, "minProperties", pointer)
        max_props = self.limit(node, "maxProperties", pointer)
        if min_props > count_required or (max_props is not None and max_props < len(properties)):
            self.problem(
                pointer,
                "minProperties" if min_props > count_required else "maxProperties",
                "a property count beside `properties` is only supported when already implied",
            )
        fresh: frozenset[str] = frozenset()  # "{" was read: recursion below is not left
        members: list[tuple[str, str, bool]] = []  # (key: value, rule hint, required)
        for name, schema in properties.items():
            value = self.node(
                schema,
                f"{pointer}/properties/{escape_pointer(name)}",
                f"{hint}-{_slug(name)}",
                fresh,
            )
            key = _literal(_json_string(name))
            member = _join(key, self.ws, _literal(":"), self.ws, value)
            members.append((member, f"{hint}-{_slug(name)}-kv", name in required))
        open_, close = _literal("{"), _literal("}")
        comma = _join(self.ws, _literal(","), self.ws)
        if all(is_required for _, _, is_required in members):
            # The common case, written flat: `"{" kv , kv , kv "}"`.
            inner = f" {comma} ".join(member for member, _, _ in members)
            return self.define(hint, _join(open_, self.ws, inner, self.ws, close))
        return self.define(hint, self.ordered_members(members, hint, open_, close, comma))

    def ordered_members(
        self, members: list[tuple[str, str, bool]], hint: str, open_: str, close: str, comma: str
    ) -> str:
        """Declared order with optional members: choose the first member written, then each
        later member in order, an optional one behind `( , kv )?`.

        `tail-i` is everything after member i-1, so the rules grow linearly with the number of
        properties, and the grammar stays unambiguous (every member starts with its own key).
        """
        names = [self.define(kv_hint, member) for member, kv_hint, _ in members]
        tails: dict[int, str] = {}
        for index in range(len(members) - 1, 0, -1):
            item = _join(comma, names[index])
            if not members[index][2]:
                item = f"( {item} )?"
            body = _join(item, tails.get(index + 1, ""))
            tails[index] = self.define(f"{hint}-after-{index}", body)
        firsts = []
        for index, (_, _, is_required) in enumerate(members):
            firsts.append(_join(names[index], tails.get(index + 1, "")))
            if is_required:
                break
        body = _join(open_, self.ws, "( " + " | ".join(firsts) + " )", self.ws, close)
        if not any(is_required for _, _, is_required in members):
            body += " | " + _join(open_, self.ws, close)
        return body

    def mapping(self, node: dict[str, Any], additional: Any, pointer: str, hint: str) -> str:
        """An object without `properties`: any keys, values from `additionalProperties`."""
        open_, close = _literal("{"), _literal("}")
        min_props = self.count(node, "minProperties", pointer)
        max_props = self.limit(node, "maxProperties", pointer)
        if additional is False:
            max_props = 0
        if additional == {}:
            additional = True
        if max_props is not None and max_props < min_props:
            return self.problem(pointer, "maxProperties", "maxProperties below minProperties")
        if max_props == 0:
            return self.define(hint, _join(open_, self.ws, close))
        if additional is True and (min_props, max_props) == (0, None):
            return self.shared("object")
        value = self.node(
            additional, f"{pointer}/additionalProperties", f"{hint}-value", frozenset()
        )
        member = self.define(
            f"{hint}-member", _join(self.shared("string"), self.ws, _literal(":"), self.ws, value)
        )
        comma = _join(self.ws, _literal(","), self.ws)
        more = self.define(f"{hint}-more", _join(comma, member))
        rest = self.repeat(
            more, max(min_props - 1, 0), None if max_props is None else max_props - 1, hint
        )
        content = _join(member, rest)
        if min_props == 0:
            body = _join(open_, self.ws, f"( {_join(content, self.ws)} )?", close)
        else:
            body = _join(open_, self.ws, content, self.ws, close)
        return self.define(hint, body)


def _tighter(a: Bound, b: Bound, *, lower: bool) -> Bound:
    if a[0] != b[0]:
        return max(a, b) if lower else min(a, b)
    return (a[0], a[1] and b[1])  # same value: exclusive wins


def _has_type(value: Any, kind: str) -> bool:
    """JSON Schema's `type` check for one value."""
    if kind == "integer":
        return (isinstance(value, int) and not isinstance(value, bool)) or (
            isinstance(value, float) and value.is_integer()
        )
    return _json_kind(value) == kind


def _json_kind(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int | float):
        return "number"
    if isinstance(value, str):
        return "string"
    return "array" if isinstance(value, list) else "object"
