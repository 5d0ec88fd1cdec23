"""The constructs the GBNF converter learned for real-world schemas (issue 16, part 5).

Each case is a small schema with documents it must accept and documents it must reject. The
documents are first checked against the schema with `jsonschema` (so the case itself is right),
then against the grammar: with llguidance here, and with llama.cpp's own grammar sampler in the
`local` test (llama-cpp-python needed: skipped without it, failed in CI). Refusals are checked
for the construct they name.
"""

from __future__ import annotations

import json
from typing import Any

import jsonschema
import pytest

from sdk.schema.gbnf import UnsupportedSchema
from sdk.schema.gbnf import to_gbnf
from tests.grammar_support import grammar_accepts
from tests.grammar_support import lark_of
from tests.local_deps import import_local

Case = tuple[str, dict[str, Any], list[str], list[str]]

DRAFT_4 = "http://json-schema.org/draft-04/schema#"
NODE = {
    "type": "object",
    "properties": {"name": {"type": "string"}, "next": {"$ref": "#/$defs/Node"}},
    "required": ["name"],
}

CASES: list[Case] = [
    (
        "unknown keywords are ignored",
        {"type": "object", "id": "x", "self": {"href": "/"}, "_format": "money",
         "properties": {"n": {"type": "integer", "maxLenght": 2, "example": 7}},
         "required": ["n"], "additionalProperties": False},
        ['{"n": 123}'],
        ['{"n": "1"}', '{}'],
    ),
    (
        "a format JSON Schema does not define is an annotation",
        {"type": "string", "format": "money"},
        ['"12 EUR"', '""'],
        ["12"],
    ),
    (
        "allOf members are intersected",
        {"allOf": [
            {"type": "object", "properties": {"a": {"type": "integer", "minimum": 0}},
             "required": ["a"]},
            {"properties": {"a": {"maximum": 9}, "b": {"type": "string"}}, "required": ["b"]},
        ]},
        ['{"a": 0, "b": ""}', '{"a": 9, "b": "x", "c": null}'],
        ['{"a": 10, "b": ""}', '{"a": 1}', '{"b": "x"}', '{"a": -1, "b": "x"}'],
    ),
    (
        "allOf: a member's additionalProperties false forbids the other member's properties",
        {"allOf": [
            {"type": "object", "properties": {"a": {"type": "integer"}},
             "additionalProperties": False},
            {"properties": {"b": {"type": "string"}}},
        ]},
        ['{"a": 1}', "{}"],
        ['{"a": 1, "b": "x"}', '{"b": "x"}'],
    ),
    (
        "allOf with a recursive $ref member stays finite",
        {"$defs": {"Node": NODE},
         "allOf": [{"$ref": "#/$defs/Node"}, {"properties": {"tag": {"const": "t"}},
                                              "required": ["tag"]}]},
        ['{"name": "a", "tag": "t"}', '{"name": "a", "next": {"name": "b"}, "tag": "t"}'],
        ['{"name": "a"}', '{"name": "a", "tag": "u"}', '{"name": "a", "next": {}, "tag": "t"}'],
    ),
    (
        "keywords beside $ref are intersected with its target",
        {"$defs": {"N": {"type": ["integer", "string"], "minimum": 1}},
         "$ref": "#/$defs/N", "type": "integer", "maximum": 3},
        ["1", "3"],
        ["0", "4", '"2"'],
    ),
    (
        "type beside anyOf",
        {"type": "string", "anyOf": [{"minLength": 3}, {"const": "x"}, {"type": "integer"}]},
        ['"x"', '"abc"'],
        ['"ab"', "5"],
    ),
    (
        "properties beside oneOf, branches told apart by a required property",
        {"type": "object", "properties": {"id": {"type": "integer"}}, "required": ["id"],
         "oneOf": [
             {"properties": {"kind": {"const": "a"}}, "required": ["kind"]},
             {"properties": {"kind": {"const": "b"}, "size": {"type": "integer"}},
              "required": ["kind", "size"]},
         ]},
        ['{"id": 1, "kind": "a"}', '{"id": 1, "kind": "b", "size": 2}'],
        ['{"id": 1}', '{"kind": "a"}', '{"id": 1, "kind": "c"}', '{"id": 1, "kind": "b"}'],
    ),
    (
        "oneOf branches disjoint because one requires what the other forbids",
        {"oneOf": [
            {"type": "object", "properties": {"a": {"type": "integer"}}, "required": ["a"]},
            {"type": "object", "properties": {"b": {"type": "integer"}}, "required": ["b"],
             "additionalProperties": False},
        ]},
        ['{"a": 1}', '{"b": 2}', '{"a": 1, "b": 2}'],
        ["{}", '{"b": "x"}'],
    ),
    (
        "patternProperties as a map",
        {"type": "object", "patternProperties": {"^x-[a-z]+$": {"type": "integer"}},
         "additionalProperties": False},
        ["{}", '{"x-a": 1, "x-bc": 2}'],
        ['{"y": 1}', '{"x-a": "s"}', '{"x-": 1}', '{"x-A": 1}'],
    ),
    (
        "patternProperties beside declared properties",
        {"type": "object", "properties": {"id": {"type": "integer"}}, "required": ["id"],
         "patternProperties": {"^x-": {"type": "string"}}, "additionalProperties": False},
        ['{"id": 1}', '{"id": 1, "x-a": "s", "x-b": ""}'],
        ['{"id": 1, "y": "s"}', '{"id": 1, "x-a": 2}', '{"x-a": "s"}'],
    ),
    (
        "other members beside declared ones never repeat a declared key",
        {"type": "object", "properties": {"name": {"type": "string"}, "nam": {"type": "integer"}},
         "required": ["name"]},
        ['{"name": "x"}', '{"name": "x", "nam": 1}', '{"name": "x", "na": 1, "names": [], "": 3}',
         '{"name": "x", "other": {"name": 1}}'],
        ['{"name": "x", "name": "y"}', '{"name": "x", "nam": "s"}', '{"nam": 1}',
         '{"name": "x", "n\\u0061me": 1}', '{"name": "x", "nam": 1, "nam": 2}'],
    ),
    (
        "an additionalProperties schema beside properties",
        {"type": "object", "properties": {"a": {"type": "string"}},
         "additionalProperties": {"type": "integer"}},
        ["{}", '{"a": "x"}', '{"b": 1}', '{"a": "x", "b": 1, "c": 2}'],
        ['{"b": "x"}', '{"a": 1}', '{"a": "x", "a": "y"}'],
    ),
    (
        "required names that properties does not declare",
        {"type": "object", "required": ["a", "b"], "additionalProperties": {"type": "integer"}},
        ['{"a": 1, "b": 2}', '{"a": 1, "b": 2, "c": 3}'],
        ['{"a": 1}', '{"a": "x", "b": 2}', '{"a": 1, "b": 2, "a": 1}'],
    ),
    (
        "dependencies: a property's presence requires others, or a schema",
        {"$schema": "http://json-schema.org/draft-07/schema#", "type": "object",
         "properties": {"a": {"type": "integer"}, "b": {"type": "string"},
                        "c": {"type": "boolean"}},
         "dependencies": {"a": ["b"], "c": {"required": ["a"]}}},
        ["{}", '{"b": "x"}', '{"a": 1, "b": "x"}', '{"a": 1, "b": "x", "c": true}',
         '{"b": "x", "d": 1}'],
        ['{"a": 1}', '{"c": true}', '{"a": 1, "c": false}', '{"d": 1, "a": 1}'],
    ),
    (
        "a property schema false: the key never appears, not even as another member",
        {"type": "object", "properties": {"a": False, "b": {"type": "integer"}}},
        ["{}", '{"b": 1}', '{"c": "x"}'],
        ['{"a": 1}', '{"b": 1, "a": 1}', '{"c": 1, "a": null}'],
    ),
    (
        "a declared property matching a pattern satisfies both schemas",
        {"type": "object", "properties": {"ab": {"type": "integer"}},
         "patternProperties": {"^a": {"minimum": 0}}},
        ["{}", '{"ab": 0}', '{"ab": 7}'],
        ['{"ab": -1}', '{"ab": "x"}'],
    ),
    (
        "dependentRequired and dependentSchemas (2020-12)",
        {"type": "object", "dependentRequired": {"a": ["b"]},
         "dependentSchemas": {"b": {"properties": {"a": {"minimum": 1}}}}},
        ["{}", '{"b": 0}', '{"a": 1, "b": 0}'],
        ['{"a": 1}', '{"a": 0, "b": 0}'],
    ),
    (
        "not: required names, types, nested not, and a property that can never appear",
        {"type": "object",
         "properties": {"a": {"type": "integer"}, "b": {}, "x": {"not": {}},
                        "t": {"not": {"type": ["string", "null"]}},
                        "u": {"not": {"not": {"type": "string"}}}},
         "not": {"required": ["a", "b"]}},
        ["{}", '{"a": 1}', '{"b": 2}', '{"t": 1}', '{"t": [null]}', '{"u": "s"}'],
        ['{"a": 1, "b": 2}', '{"x": 1}', '{"t": "s"}', '{"t": null}', '{"u": 1}'],
    ),
    (
        "not of anyOf beside anyOf",
        {"type": "object", "anyOf": [{"required": ["a"]}],
         "not": {"anyOf": [{"required": ["b"]}, {"required": ["c"]}]}},
        ['{"a": 1}', '{"a": 1, "d": 2}'],
        ['{"a": 1, "b": 1}', '{"a": 1, "c": 1}', "{}"],
    ),
    (
        "not integer: every other type (the numbers that are not integers are left out)",
        {"not": {"type": "integer"}},
        ['"s"', "null", "[]", "{}", "true"],
        ["1", "-3"],
    ),
    (
        "oneOf with overlapping branches: each branch excludes the others",
        {"type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}},
         "oneOf": [{"required": ["a"]}, {"required": ["b"]}]},
        ['{"a": 1}', '{"b": 1}', '{"a": 1, "c": 2}'],
        ['{"a": 1, "b": 2}', "{}", '{"c": 2}'],
    ),
    (
        "oneOf of three, two of them told apart by type",
        {"oneOf": [{"type": "string"}, {"type": "object", "required": ["x"]},
                   {"type": "object", "required": ["y"]}]},
        ['"s"', '{"x": 1}', '{"y": 1}'],
        ['{"x": 1, "y": 2}', "{}", "1"],
    ),
    (
        "an optional property no value satisfies is left out; a union branch likewise",
        {"type": "object",
         "properties": {"e": {"type": "object", "enum": ["a", "b"]},
                        "u": {"type": "string", "anyOf": [{"type": "integer"}, {"maxLength": 1}]}}},
        ["{}", '{"u": "x"}'],
        ['{"e": "a"}', '{"u": 1}', '{"u": "xy"}'],
    ),
    (
        "minProperties 1 beside optional properties: the empty object is left out",
        {"type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "string"}},
         "minProperties": 1, "additionalProperties": False},
        ['{"a": 1}', '{"b": ""}', '{"a": 1, "b": ""}'],
        ["{}", '{"c": 1}'],
    ),
    (
        "oneOf told apart by a property's value: each branch excludes the other's strings",
        {"type": "object", "required": ["url"],
         "properties": {"url": {"type": "string"}, "category": {"type": "string"}},
         "oneOf": [{"properties": {"category": {"enum": ["a"]}}},
                   {"properties": {"category": {"enum": ["b"]}}}]},
        ['{"url": "u", "category": "a"}', '{"url": "u", "category": "b"}'],
        ['{"url": "u"}', '{"url": "u", "category": "c"}'],
    ),
    (
        "not enum of strings: any other value, any other string",
        {"not": {"enum": ["x", "y"]}},
        ['"z"', "1", "null", '"xy"', '""'],
        ['"x"', '"y"', '"\\u0078"'],
    ),
    (
        "draft 4 tuples: items as a list, then additionalItems",
        {"$schema": DRAFT_4, "type": "array",
         "items": [{"type": "integer"}, {"type": "string"}], "additionalItems": False},
        ["[]", "[1]", '[1, "a"]'],
        ['[1, "a", 2]', '["a"]'],
    ),
    (
        "draft 4 boolean exclusiveMinimum and exclusiveMaximum",
        {"$schema": DRAFT_4, "type": "integer", "minimum": 1, "exclusiveMinimum": True,
         "maximum": 5, "exclusiveMaximum": False},
        ["2", "5"],
        ["1", "6"],
    ),
    (
        "a pattern narrowed to maxLength: repetitions capped",
        {"type": "string", "pattern": "^([a-z]+):([a-z.]+)$", "maxLength": 8},
        ['"a:b"', '"abc:d.e"'],
        ['"abcd:efgh"', '"a:"', '"a-b"'],
    ),
    (
        "a pattern narrowed to minLength and maxLength, an open end bounded too",
        {"type": "string", "pattern": "[0-9a-f]+", "minLength": 4, "maxLength": 6},
        ['"0a1b"', '"0a1b2c"'],
        ['"0a1"', '"0a1b2c3"', '"xyz"'],
    ),
    (
        "format uri",
        {"type": "string", "format": "uri"},
        ['"https://example.com/a/b?x=1&y=2#top"', '"urn:isbn:0451450523"', '"mailto:a@b.org"',
         '"http://user:pw@host:8080/p%20q"'],
        ['"example.com"', '"http://exa mple.com"', '"://x"', '"1http://x"', '"http://x/%zz"',
         '""'],
    ),
    (
        "format uri-reference",
        {"type": "string", "format": "uri-reference"},
        ['"/a/b"', '"a/b?c"', '""', '"#x"', '"https://e.com"', '"//host/p"'],
        ['"a b"', '"/%z1"'],
    ),
    (
        "format email",
        {"type": "string", "format": "email"},
        ['"a@b.co"', '"first.last+tag@sub.example.org"'],
        ['"a@"', '"@b.co"', '"a b@c.de"', '"a..b@c.de"', '"a@b.1"'],
    ),
    (
        "format hostname",
        {"type": "string", "format": "hostname"},
        ['"localhost"', '"a-b.example.com"'],
        ['"-a.com"', '"a..b"', '"a_b.com"'],
    ),
    (
        "format ipv4",
        {"type": "string", "format": "ipv4"},
        ['"0.0.0.0"', '"255.255.255.255"', '"10.1.22.3"'],
        ['"256.1.1.1"', '"1.1.1"', '"1.1.1.1.1"'],
    ),
    (
        "format json-pointer",
        {"type": "string", "format": "json-pointer"},
        ['""', '"/a/b~0c/~1"'],
        ['"a"', '"/~2"', '"/~"'],
    ),
]  # fmt: skip

# Each refusal names the construct: (schema, JSON pointer of the problem).
REFUSALS: list[tuple[str, dict[str, Any], str]] = [
    ("oneOf that may overlap", {"oneOf": [{"type": "integer"}, {"minimum": 2}]}, "/oneOf"),
    ("the complement of a pattern", {"type": "string", "not": {"pattern": "^a"}}, "/not"),
    ("a format JSON Schema defines but the converter cannot write",
     {"type": "string", "format": "ipv6"}, "/format"),
    ("two different patterns", {"allOf": [{"pattern": "^a"}, {"pattern": "b$"}]}, "/pattern"),
    ("patterns with different schemas",
     {"type": "object", "patternProperties": {"^a": {"type": "integer"}, "^b": {}}},
     "/patternProperties"),
    ("a required property additionalProperties forbids",
     {"type": "object", "required": ["a"], "additionalProperties": False}, "/required"),
    ("draft 3's boolean required",
     {"type": "object", "properties": {"a": {"type": "string", "required": True}}},
     "/properties/a/required"),
    ("draft 3", {"$schema": "http://json-schema.org/draft-03/schema#", "type": "string"},
     "/$schema"),
    ("a $ref below an embedded $id",
     {"$defs": {"A": {"type": "integer"}},
      "properties": {"x": {"$id": "http://other.example/x", "$ref": "#/$defs/A"}}},
     "/properties/x/$ref"),
    ("unevaluatedProperties in an intersection",
     {"allOf": [{"properties": {"a": {}}}, {"unevaluatedProperties": False}]},
     "/unevaluatedProperties"),
    ("an allOf no value satisfies", {"allOf": [{"type": "string"}, {"type": "integer"}]},
     "/allOf"),
]  # fmt: skip


def _validator(schema: dict[str, Any]) -> Any:
    return jsonschema.validators.validator_for(schema, jsonschema.Draft202012Validator)(schema)


def _valid(schema: dict[str, Any], text: str) -> bool:
    return bool(_validator(schema).is_valid(json.loads(text)))


@pytest.mark.parametrize(
    ("name", "schema", "accepted", "rejected"), CASES, ids=[c[0] for c in CASES]
)
def test_construct_with_llguidance(
    name: str, schema: dict[str, Any], accepted: list[str], rejected: list[str]
) -> None:
    grammar = to_gbnf(schema)
    for text in accepted:
        assert _valid(schema, text), f"the case is wrong: {text} is invalid"
        assert grammar_accepts(grammar, text), text
    for text in rejected:
        assert not grammar_accepts(grammar, text), text


@pytest.mark.local
@pytest.mark.parametrize(
    ("name", "schema", "accepted", "rejected"), CASES, ids=[c[0] for c in CASES]
)
def test_construct_with_llama_cpp(
    name: str, schema: dict[str, Any], accepted: list[str], rejected: list[str]
) -> None:
    import_local("llama_cpp")
    from tests.grammar_support import llama_accepts

    grammar = to_gbnf(schema)
    for text in accepted:
        assert llama_accepts(grammar, text), text
    for text in rejected:
        assert not llama_accepts(grammar, text), text


def test_rejected_documents_that_parse_are_invalid() -> None:
    """The rejected documents that are JSON without repeated keys are invalid for the schema
    (the others are rejected for their spelling: the grammar never writes a key twice)."""

    def no_repeats(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
        if len({key for key, _ in pairs}) < len(pairs):
            raise ValueError("repeated key")
        return dict(pairs)

    for name, schema, _, rejected in CASES:
        if name.startswith("format "):
            continue  # jsonschema checks these formats only with optional packages
        for text in rejected:
            try:
                value = json.loads(text, object_pairs_hook=no_repeats)
            except ValueError:
                continue
            assert not _validator(schema).is_valid(value) or (
                "\\u" in text  # a declared key spelled with an escape: valid, never written
            ), text


@pytest.mark.parametrize(("name", "schema", "pointer"), REFUSALS, ids=[r[0] for r in REFUSALS])
def test_refusals_name_the_construct(name: str, schema: dict[str, Any], pointer: str) -> None:
    with pytest.raises(UnsupportedSchema) as caught:
        to_gbnf(schema)
    assert pointer in [problem.pointer for problem in caught.value.problems], caught.value


def test_llguidance_harness_keeps_every_rule_a_parser_rule() -> None:
    """llguidance's own gbnf_to_lark makes `after` a lexeme and then rejects `{, L, F}`."""
    grammar = (
        'root ::= "{" opt "}"\nopt ::= ("," ws r)? after\nr ::= "L" | "[" r "]"\n'
        'after ::= ws "," ws "F"\nws ::= " "?\n'
    )
    assert grammar_accepts(grammar, "{, L, F}")
    assert grammar_accepts(grammar, "{, [L], F}")
    assert grammar_accepts(grammar, "{, F}")
    assert not grammar_accepts(grammar, "{, L}")
    assert "AFTER" not in lark_of(grammar)


@pytest.mark.local
def test_llama_cpp_harness_tells_sentences_from_prefixes() -> None:
    import_local("llama_cpp")
    from tests.grammar_support import LlamaGrammarError
    from tests.grammar_support import llama_accepts

    grammar = 'root ::= "{" [a-z]+ "}"\n'
    assert llama_accepts(grammar, "{abc}")
    assert not llama_accepts(grammar, "{abc")
    assert not llama_accepts(grammar, "{}")
    assert not llama_accepts(grammar, "{abc} ")
    with pytest.raises(LlamaGrammarError):
        llama_accepts("root ::= missing\n", "x")


def test_a_large_schema_converts_in_one_pass() -> None:
    """400 definitions with enums beside other keywords: the enum filter evolves one validator
    instead of checking a copy of the whole schema per node (which was quadratic)."""
    defs = {
        f"D{i}": {
            "type": "object",
            "properties": {
                "kind": {"type": "string", "enum": ["a", "bb", "ccc"], "maxLength": 2},
                "next": {"$ref": f"#/$defs/D{(i + 1) % 400}"},
            },
            "required": ["kind"],
        }
        for i in range(400)
    }
    schema = {"$defs": defs, "$ref": "#/$defs/D0"}
    grammar = to_gbnf(schema)
    assert grammar_accepts(grammar, '{"kind": "bb", "next": {"kind": "a"}}')
    assert not grammar_accepts(grammar, '{"kind": "ccc"}')
