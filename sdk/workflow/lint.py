"""The schema linter: shapes that make a model confabulate, or that break caching or a provider.

    >>> from contracts import Sentiment
    >>> report = lint(Sentiment)
    >>> report.findings          # nothing left to fix
    []
    >>> [s.finding.code.value for s in report.suppressed]   # deliberate, each with its reason
    ['no-abstention', 'enum-no-escape']

Each `Finding` has a code, the JSON pointer of the schema node, a one-line message saying what
goes wrong, and a suggested fix. The rules themselves live in `_lint_rules.py`, one function per
code (see `LintCode` for the list).

Suppressing a finding is a decision about one field, so it is written in the contract, next to
the fields, with its reason, as the class attribute `lint_ignore`:

    class Sentiment(Contract):
        lint_ignore = {
            "/properties/score": {"no-abstention": "every text has a tone, so a strength exists"},
        }

The key is a JSON pointer into the contract's own schema (`""` for the whole contract); a
suppression covers that node and everything below it. A nested contract declares its own, and
they apply wherever it is used. `lint_ignore` is not part of the schema, so it changes no
fingerprint. A suppression with an unknown code, an empty reason or a pointer to nothing is
itself a finding (`bad-suppression`), so stale suppressions do not pile up silently.
"""

from __future__ import annotations

import typing
from collections.abc import Iterable
from collections.abc import Iterator
from collections.abc import Mapping
from dataclasses import dataclass
from dataclasses import field
from typing import TYPE_CHECKING
from typing import Any

from sdk.contract import Contract
from sdk.schema._shape import node_at
from sdk.schema.canonical import canonical_schema
from sdk.schema.canonical import escape_pointer
from sdk.workflow._lint_rules import RULES
from sdk.workflow._lint_rules import Context
from sdk.workflow._linting import Finding
from sdk.workflow._linting import LintCode

if TYPE_CHECKING:
    from sdk.schema.dialects import Dialect

__all__ = [
    "Finding",
    "LintCode",
    "LintReport",
    "Suppressed",
    "dialect_named",
    "lint",
    "lint_all",
    "lint_schema",
    "suppressions_of",
]


@dataclass(frozen=True, slots=True)
class Suppressed:
    """A finding the contract deliberately accepts, and the reason it gives."""

    finding: Finding
    reason: str


@dataclass(frozen=True)
class LintReport:
    """The findings on one schema, and the ones its contract suppressed."""

    name: str
    findings: list[Finding] = field(default_factory=list)
    suppressed: list[Suppressed] = field(default_factory=list)

    @property
    def clean(self) -> bool:
        """No finding left unsuppressed."""
        return not self.findings

    def codes(self) -> list[LintCode]:
        """The codes of the unsuppressed findings, in order."""
        return [finding.code for finding in self.findings]

    def to_json(self) -> dict[str, Any]:
        return {
            "contract": self.name,
            "findings": [f.to_json() for f in self.findings],
            "suppressed": [{**s.finding.to_json(), "reason": s.reason} for s in self.suppressed],
        }


def dialect_named(name: str) -> Dialect:
    """The dialect a provider sends its schema in, by provider name or alias (`openai`,
    `llama.cpp`, `openai_chat`) or by dialect name (`openai_strict`); `ValueError` naming the
    valid names otherwise."""
    from sdk._values.profile import profile
    from sdk.schema.dialects import dialects

    every = dialects()
    dialect = every.get(name.strip().lower())
    if dialect is not None:
        return dialect
    try:
        found = profile(name)
    except ValueError as error:
        raise ValueError(f"{error}; dialects: {', '.join(sorted(every))}") from None
    if found.dialect is None:
        raise ValueError(f"provider {found.name!r} sends no JSON schema dialect")
    return found.dialect


def _documented_limits() -> list[Dialect]:
    from sdk.schema.dialects import dialects

    return [dialect for _, dialect in sorted(dialects().items()) if dialect.limits is not None]


def lint(contract: type[Contract], *, provider: str | Dialect | None = None) -> LintReport:
    """Lint a contract's canonical schema, honouring its (and its nested contracts') suppressions.

    With `provider`, the provider-specific checks (stripped constraints, grammar limits) are
    for that provider; without, stripped constraints are not reported and the grammar limits of
    every provider that documents some are checked, each finding naming its provider.
    """
    return lint_schema(
        canonical_schema(contract),
        provider=provider,
        ignore=suppressions_of(contract),
        name=contract.__name__,
    )


def lint_schema(
    schema: dict[str, Any],
    *,
    provider: str | Dialect | None = None,
    ignore: Mapping[str, Mapping[str, str]] | None = None,
    name: str | None = None,
) -> LintReport:
    """Lint a schema document; `ignore` maps document pointers to `{code: reason}`."""
    dialect = dialect_named(provider) if isinstance(provider, str) else provider
    # Without a provider, the grammar limits of every provider that documents some.
    limit_dialects = [dialect] if dialect is not None else _documented_limits()
    context = Context(schema, dialect, limit_dialects)
    found = [finding for rule in RULES for finding in rule(context)]
    ignore = ignore or {}
    findings = list(_check_suppressions(schema, ignore))
    suppressed = []
    for finding in found:
        reason = _reason_for(finding, ignore)
        if reason is None:
            findings.append(finding)
        else:
            suppressed.append(Suppressed(finding, reason))
    title = schema.get("title")
    label = name if name is not None else title if isinstance(title, str) else ""
    return LintReport(label, findings, suppressed)


def _reason_for(finding: Finding, ignore: Mapping[str, Mapping[str, str]]) -> str | None:
    """The reason of the suppression covering a finding: at its pointer or an ancestor's."""
    for pointer, codes in ignore.items():
        covers = (
            pointer == "" or finding.pointer == pointer or finding.pointer.startswith(pointer + "/")
        )
        reason = codes.get(finding.code.value) if covers else None
        if isinstance(reason, str) and reason.strip():
            return reason
    return None


def _check_suppressions(
    schema: dict[str, Any], ignore: Mapping[str, Mapping[str, str]]
) -> Iterator[Finding]:
    known = {code.value for code in LintCode} - {LintCode.BAD_SUPPRESSION.value}
    fix = "correct or remove the entry in the contract's lint_ignore"
    for pointer, codes in ignore.items():
        try:
            node_at(schema, pointer)
        except (KeyError, IndexError, ValueError, TypeError):
            yield Finding(
                LintCode.BAD_SUPPRESSION,
                pointer,
                f"lint_ignore names {pointer!r}, which is not in the schema (a renamed field?)",
                fix,
            )
            continue
        for code, reason in codes.items():
            if code not in known:
                yield Finding(
                    LintCode.BAD_SUPPRESSION,
                    pointer,
                    f"lint_ignore names unknown code {code!r}",
                    fix,
                )
            elif not isinstance(reason, str) or not reason.strip():
                yield Finding(
                    LintCode.BAD_SUPPRESSION,
                    pointer,
                    f"lint_ignore suppresses {code!r} without a reason: say why it is deliberate",
                    fix,
                )


def suppressions_of(contract: type[Contract]) -> dict[str, dict[str, str]]:
    """Every `lint_ignore` that applies to a contract's schema, keyed by document pointer.

    The contract's own entries keep their pointers; a nested contract's are moved under its
    definition (`/properties/quantity` of `LineItem` becomes `/$defs/LineItem/properties/quantity`).
    """
    schema = canonical_schema(contract)
    merged: dict[str, dict[str, str]] = {}
    _merge(merged, "", contract.lint_ignore)
    definitions = schema.get("$defs", {})
    for nested in _nested_contracts(contract):
        key = _definition_key(nested, definitions)
        if key is not None:
            _merge(merged, f"/$defs/{escape_pointer(key)}", nested.lint_ignore)
    return merged


def _merge(
    merged: dict[str, dict[str, str]], prefix: str, entries: Mapping[str, Mapping[str, str]]
) -> None:
    for pointer, codes in entries.items():
        merged.setdefault(prefix + pointer, {}).update(codes)


def _definition_key(nested: type[Contract], definitions: Mapping[str, Any]) -> str | None:
    """The `$defs` key Pydantic gave a nested model (module-qualified when names clash)."""
    name = nested.__name__
    if name in definitions:
        return name
    return next((key for key in definitions if key.endswith(f"__{name}")), None)


def _nested_contracts(contract: type[Contract]) -> list[type[Contract]]:
    """Contracts used inside a contract's fields, at any depth (`list[LineItem]`, `Fix | None`)."""
    found: list[type[Contract]] = []

    def visit(annotation: Any) -> None:
        if isinstance(annotation, type) and issubclass(annotation, Contract):
            if annotation is not contract and annotation not in found:
                found.append(annotation)
                for inner in annotation.model_fields.values():
                    visit(inner.annotation)
            return
        for argument in typing.get_args(annotation):
            visit(argument)

    for info in contract.model_fields.values():
        visit(info.annotation)
    return found


def lint_all(
    contracts: Iterable[type[Contract]], *, provider: str | Dialect | None = None
) -> list[LintReport]:
    """Lint several contracts (what `sdk schema lint PACKAGE` does)."""
    return [lint(contract, provider=provider) for contract in contracts]
