"""Never wider than the schema: random schemas built from the constructs the converter
intersects, negates and distributes, against random values over the same small vocabulary.

Whatever the grammar accepts must be valid for `jsonschema` (the converter may refuse a schema,
or accept less than it allows; it may never accept more). The vocabulary is small on purpose
(three property names, a few numbers and strings) so that values often hit what the schemas
talk about and the grammar accepts a good share of them.
"""

from __future__ import annotations

import json
from typing import Any

import jsonschema
from hypothesis import HealthCheck
from hypothesis import assume
from hypothesis import given
from hypothesis import settings
from hypothesis import strategies as st

from sdk.schema.gbnf import UnsupportedSchema
from sdk.schema.gbnf import to_gbnf
from tests.grammar_support import grammar_accepts

NAMES = ["a", "b", "x1"]
STRINGS = ["", "a", "ab", "b", "x1"]

_scalars = st.none() | st.booleans() | st.integers(-3, 3) | st.sampled_from(STRINGS)
values = st.recursive(
    _scalars,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.sampled_from(NAMES), inner),
    max_leaves=6,
)

_leaves = st.one_of(
    st.just(True),
    st.sampled_from(["null", "boolean", "integer", "string", "array", "object"]).map(
        lambda kind: {"type": kind}
    ),
    st.lists(_scalars, min_size=1, max_size=3).map(lambda listed: {"enum": listed}),
    st.tuples(st.integers(-2, 1), st.integers(0, 2)).map(
        lambda bounds: {"type": "integer", "minimum": bounds[0], "maximum": bounds[1]}
    ),
    st.integers(0, 2).map(lambda most: {"type": "string", "maxLength": most}),
    st.just({"type": "string", "pattern": "^[ab]+$"}),
    st.lists(st.sampled_from(NAMES), min_size=1, max_size=2, unique=True).map(
        lambda names: {"required": names}
    ),
)


_dict_leaves = _leaves.filter(lambda leaf: isinstance(leaf, dict))


def _composite(inner: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    named = st.dictionaries(st.sampled_from(NAMES), inner, max_size=2)
    objects = st.fixed_dictionaries(
        {"type": st.just("object"), "properties": named},
        optional={
            "required": st.lists(st.sampled_from(NAMES), max_size=2, unique=True),
            "additionalProperties": st.booleans() | inner,
            "minProperties": st.integers(0, 2),
            "patternProperties": st.dictionaries(st.just("^x"), inner, max_size=1),
            "dependentRequired": st.dictionaries(
                st.sampled_from(NAMES), st.lists(st.sampled_from(NAMES), max_size=1), max_size=1
            ),
        },
    )
    parts = st.lists(inner, min_size=1, max_size=3)
    return st.one_of(
        objects,
        parts.map(lambda members: {"allOf": members}),
        parts.map(lambda members: {"anyOf": members}),
        parts.map(lambda members: {"oneOf": members}),
        inner.map(lambda member: {"not": member}),
        st.tuples(_dict_leaves, parts).map(lambda pair: {**pair[0], "oneOf": pair[1]}),
        st.tuples(_dict_leaves, inner).map(lambda pair: {**pair[0], "allOf": [pair[1]]}),
        st.lists(inner, max_size=3).map(
            lambda items: (
                {"type": "array", "items": {"anyOf": items}} if items else {"type": "array"}
            )
        ),
    )


schemas = st.recursive(_leaves, _composite, max_leaves=5)


@settings(
    max_examples=400,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
)
@given(schema=schemas, batch=st.lists(values, min_size=1, max_size=8))
def test_what_the_grammar_accepts_is_valid(schema: Any, batch: list[Any]) -> None:
    schema = schema if isinstance(schema, dict) else {"allOf": [schema]}
    before = json.dumps(schema)
    try:
        grammar = to_gbnf(schema)
    except UnsupportedSchema:
        assume(False)
        return
    finally:
        assert json.dumps(schema) == before  # the schema is read, never changed
    validator = jsonschema.Draft202012Validator(schema)
    for value in batch:
        text = json.dumps(value, separators=(",", ":"))
        if grammar_accepts(grammar, text):
            assert validator.is_valid(value), (schema, text)


def test_an_intersection_keeps_additional_properties_for_patterned_names() -> None:
    # One side forbids undeclared names, the other constrains names by a pattern: in the
    # intersection `x1` is still undeclared for the first side, so it stays forbidden.
    for forbidding in [
        {"additionalProperties": False},
        {"additionalProperties": {"type": "string"}},
    ]:
        schema = {"allOf": [forbidding, {"patternProperties": {"^x": {}}}]}
        grammar = to_gbnf(schema)
        assert not jsonschema.Draft202012Validator(schema).is_valid({"x1": 1})
        assert not grammar_accepts(grammar, '{"x1":1}')
    allowed = {
        "allOf": [{"additionalProperties": {"type": "string"}}, {"patternProperties": {"^x": {}}}]
    }
    assert grammar_accepts(to_gbnf(allowed), '{"x1":"s"}')
