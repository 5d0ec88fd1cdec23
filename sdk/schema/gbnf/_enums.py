"""`enum` and `const`: the listed values that satisfy their sibling keywords, as literals."""

from __future__ import annotations

from typing import Any

from sdk.schema.gbnf._gbnf_text import literal
from sdk.schema.gbnf._json_values import has_type
from sdk.schema.gbnf._json_values import json_text
from sdk.schema.gbnf._keywords import ANNOTATIONS
from sdk.schema.gbnf._keywords import CONTAINERS
from sdk.schema.gbnf._keywords import NOT_IN
from sdk.schema.gbnf._walker import SchemaWalker


class EnumRules(SchemaWalker):
    """Rules for `enum` and `const` nodes."""

    validator: Any = None  # the document's jsonschema validator, built when first needed

    def enum(self, node: dict[str, Any], pointer: str, hint: str) -> str:
        source = "enum" if "enum" in node else "const"
        values = node["enum"] if source == "enum" else [node["const"]]
        if not isinstance(values, list) or not values:
            return self.problem(pointer, source, "`enum` must be a non-empty list")
        excluded = node.get(NOT_IN, [])
        values = [v for v in values if not (isinstance(v, str) and v in excluded)]
        siblings = {
            key: value
            for key, value in node.items()
            if key != source and key not in ANNOTATIONS and key not in CONTAINERS and key != NOT_IN
            if not key.startswith("x-")
        }
        if set(siblings) == {"type"} and isinstance(siblings["type"], str):
            # The common case (`{"type": "string", "enum": [...]}`) needs no validator.
            values = [v for v in values if has_type(v, siblings["type"])]
        elif siblings:
            kept = self.filter_values(values, siblings, pointer, source)
            if kept is None:
                return '"?"'
            values = kept
        try:
            texts = list(dict.fromkeys(json_text(value) for value in values))
        except ValueError as error:
            return self.problem(pointer, source, str(error))
        if not texts:
            return self.problem(pointer, source, "no listed value satisfies the other keywords")
        return self.alternatives([literal(text) for text in texts], hint)

    def filter_values(
        self, values: list[Any], siblings: dict[str, Any], pointer: str, source: str
    ) -> list[Any] | None:
        """The values that also satisfy the sibling keywords: exact, because finite.

        One validator for the whole document (its draft, its `$ref`s), evolved to each node:
        the schema is neither copied nor checked again per node, so the time stays linear.
        """
        try:
            validator = self.root_validator().evolve(schema=siblings)
            return [value for value in values if validator.is_valid(value)]
        except Exception as error:  # a malformed keyword or an unresolvable `$ref`
            self.problem(pointer, source, f"cannot check the values against the siblings: {error}")
            return None

    def root_validator(self) -> Any:
        if self.validator is None:
            # The core's validator; imported here because only enum nodes with siblings need it.
            import jsonschema

            cls = jsonschema.validators.validator_for(self.root, jsonschema.Draft202012Validator)
            self.validator = cls(self.root, format_checker=cls.FORMAT_CHECKER)
        return self.validator
