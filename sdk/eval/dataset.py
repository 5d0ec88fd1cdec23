"""Eval datasets: JSONL, one labelled item a line.

    {"id": "inv-007", "document": "INVOICE ...", "prompt": "Extract this invoice.",
     "expected": {"vendor": "Northwind Ltd.", "total": 315.0, "issue_date": null}}

`id` names the item (unique), `document` is the source text (given to the call as `source`, so
evidence quotes are checked against it), `prompt` is optional (the dataset's default otherwise),
and `expected` holds the label of each scored field: the value the contract should hold, in its
JSON form, or `null` for "the document does not say" (the right answer is to abstain: `null`, or
an escape member such as `unknown`). Only the fields named in `expected` are scored, and only
top-level fields.

With a prompt template (`load_dataset(path, contract, prompt=Triage)`, `sdk eval --prompt`),
an item gives the template's `variables` (a JSON object) instead of `prompt`; the template is
rendered for the contract when the dataset is read (a bad variable is an error on its line), every
arm asks with it, and every outcome names it (name, version, fingerprint). An item's digest
includes the template's fingerprint, so a resumed run redoes the items of a changed template.

Labels are checked when the dataset is read, against the widened contract's field types (so a
`null` label is allowed on every field, and a misspelt enum label is an error on its line, not a
silently wrong score).
"""

from __future__ import annotations

import hashlib
import io
import json
from collections.abc import Iterable
from collections.abc import Iterator
from collections.abc import Mapping
from dataclasses import dataclass
from dataclasses import field
from pathlib import Path
from typing import Annotated
from typing import Any

from pydantic import TypeAdapter
from pydantic import ValidationError

from sdk._files import open_regular
from sdk._values.position import decoding_problem
from sdk.contract import Contract
from sdk.contract.derived import widen
from sdk.prompt import Prompt

__all__ = [
    "DEFAULT_PROMPT",
    "DatasetError",
    "EvalItem",
    "item_digest",
    "load_dataset",
    "parse_dataset",
]

DEFAULT_PROMPT = "Read the document and fill in the requested fields."
"""The prompt of an item that has none."""

# A line longer than this is not a document anyone labelled by hand.
_MAX_LINE = 1_000_000


class DatasetError(ValueError):
    """A dataset line that is not a valid item (where and why in the message)."""


@dataclass(frozen=True)
class EvalItem:
    """One labelled input."""

    id: str
    document: str
    expected: Mapping[str, Any]
    """Field name -> label in JSON form; `None`: the right answer is to abstain."""
    prompt: str = DEFAULT_PROMPT
    """The prompt's text (with a template: its user turn, rendered)."""
    template: Prompt | None = None
    """The prompt template with the item's variables, which every arm asks with."""
    digest: str = field(init=False, compare=False)
    """sha256 of what the item asks and expects (`item_digest`), computed from its fields (an
    item built by hand or by `dataclasses.replace` has the right one): a resumed run redoes an
    item that changed."""

    def __post_init__(self) -> None:
        asked = self.prompt
        if self.template is not None:
            asked = f"{self.prompt}\n{self.template.fingerprint()}"  # a changed system prompt too
        digest = item_digest(self.id, self.document, asked, self.expected)
        object.__setattr__(self, "digest", digest)

    @property
    def asks_with(self) -> str | Prompt:
        """What a call's `prompt=` gets: the template with its variables, or the text."""
        return self.template if self.template is not None else self.prompt

    def to_json(self) -> dict[str, Any]:
        said: dict[str, Any] = {
            "id": self.id,
            "document": self.document,
            "prompt": self.prompt,
            "expected": dict(self.expected),
        }
        if self.template is not None:
            variables = self.template.inputs.model_dump(mode="json")
            said["template"] = {**self.template.info().to_json(), "variables": variables}
        return said


def item_digest(
    item_id: str, document: str, prompt: str | None, expected: Mapping[str, Any]
) -> str:
    """The digest of an item: its id, document, prompt (the default prompt counts as none, as in
    a dataset line without one) and labels in JSON form."""
    shown = None if prompt in (None, DEFAULT_PROMPT) else prompt
    text = json.dumps([item_id, document, shown, dict(expected)], sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()


def load_dataset(
    path: str | Path, contract: type[Contract], *, prompt: type[Prompt] | None = None
) -> list[EvalItem]:
    """Read and check a JSONL dataset for `contract` (module docstring); `DatasetError` names the
    first bad line. `prompt`: the template the items' `variables` are for."""
    path = Path(path)
    with io.TextIOWrapper(open_regular(path), encoding="utf-8") as file:
        try:
            return parse_dataset(_bounded(file), contract, name=str(path), prompt=prompt)
        except UnicodeDecodeError as error:
            raise ValueError(f"{path}: not UTF-8 ({error.reason})") from None


def _bounded(file: io.TextIOWrapper) -> Iterator[str]:
    """The lines of `file`, each read at most one character past `_MAX_LINE` (a line past it is
    refused by `parse_dataset` before the rest of it is read: a dataset of one 200 MB line was
    held whole)."""
    while line := file.readline(_MAX_LINE + 1):
        yield line


def parse_dataset(
    lines: Iterable[str],
    contract: type[Contract],
    *,
    name: str = "<dataset>",
    prompt: type[Prompt] | None = None,
) -> list[EvalItem]:
    """The items of JSONL text, checked against `contract` (and rendered with `prompt`, when
    given); blank lines are skipped."""
    adapters = _label_adapters(contract)
    items: list[EvalItem] = []
    seen: set[str] = set()
    for number, line in enumerate(lines, 1):
        where = f"{name}:{number}"
        if len(line) > _MAX_LINE:
            raise DatasetError(f"{where}: a line longer than {_MAX_LINE:,} characters is too long")
        if not line.strip():
            continue
        item = _item(line, adapters, contract, where, prompt)
        if item.id in seen:
            raise DatasetError(f"{where}: id {item.id!r} is used twice")
        seen.add(item.id)
        items.append(item)
    if not items:
        raise DatasetError(f"{name}: no items")
    return items


def _item(
    line: str,
    adapters: Mapping[str, TypeAdapter[Any]],
    contract: type[Contract],
    where: str,
    template: type[Prompt] | None = None,
) -> EvalItem:
    try:
        data = json.loads(line)
    except ValueError as error:
        raise DatasetError(f"{where}: not JSON: {decoding_problem(error)}") from None
    except RecursionError:
        raise DatasetError(f"{where}: JSON nested too deeply") from None
    if not isinstance(data, dict):
        raise DatasetError(f"{where}: an item is a JSON object, not {type(data).__name__}")
    unknown = sorted(set(data) - {"id", "document", "prompt", "expected", "variables"})
    if unknown:
        raise DatasetError(f"{where}: unknown key(s) {', '.join(unknown)}")
    item_id, document, prompt = data.get("id"), data.get("document"), data.get("prompt")
    if not isinstance(item_id, str) or not item_id.strip():
        raise DatasetError(f"{where}: 'id' must be a non-empty string")
    if not isinstance(document, str) or not document.strip():
        raise DatasetError(f"{where}: 'document' must be a non-empty string")
    if prompt is not None and (not isinstance(prompt, str) or not prompt.strip()):
        raise DatasetError(f"{where}: 'prompt' must be a non-empty string when given")
    expected = data.get("expected")
    if not isinstance(expected, dict) or not expected:
        raise DatasetError(f"{where}: 'expected' must be an object naming at least one field")
    labels: dict[str, Any] = {}
    for key, label in expected.items():
        adapter = adapters.get(key)
        if adapter is None:
            raise DatasetError(
                f"{where}: {key!r} is not a field of {contract.__name__} "
                f"(fields: {', '.join(adapters)})"
            )
        try:
            value = adapter.validate_json(json.dumps(label))
        except ValidationError as error:
            problem = error.errors(include_url=False)[0]["msg"]
            raise DatasetError(f"{where}: label of {key!r} is not valid: {problem}") from None
        labels[key] = adapter.dump_python(value, mode="json")
    if template is None and "variables" not in data:
        return EvalItem(item_id, document, labels, prompt or DEFAULT_PROMPT)
    asked = _templated(template, data, contract, where)
    return EvalItem(item_id, document, labels, asked.render(contract=contract).text, asked)


def _templated(
    template: type[Prompt] | None, data: Mapping[str, Any], contract: type[Contract], where: str
) -> Prompt:
    """The item's template with its variables, rendered once to check it renders."""
    if template is None:
        raise DatasetError(f"{where}: 'variables' are for a prompt template (--prompt)")
    if "prompt" in data:
        raise DatasetError(f"{where}: give {template.name}'s 'variables', not a 'prompt'")
    try:
        asked = template.from_json(data.get("variables", {}))
        asked.render(contract=contract)
    except (ValueError, TypeError) as error:  # a bad variable, a template error, an empty text
        raise DatasetError(f"{where}: {template.name}: {' '.join(str(error).split())}") from None
    return asked


def _label_adapters(contract: type[Contract]) -> dict[str, TypeAdapter[Any]]:
    """A strict validator per top-level field, of the widened field's type (`null` allowed)."""
    widened = widen(contract)
    # The FieldInfo rides along in `Annotated`, so a label meets the field's bounds too.
    return {
        name: TypeAdapter[Any](Annotated[info.annotation, info])  # type: ignore[arg-type]
        for name, info in widened.model_fields.items()
    }
