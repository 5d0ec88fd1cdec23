"""The linter's records: `LintCode` and `Finding`, below both the rules and the linter."""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from typing import Any

__all__ = ["Finding", "LintCode"]


class LintCode(StrEnum):
    """Every finding the linter can report."""

    NO_ABSTENTION = "no-abstention"
    """A required, non-nullable number, date or identifier: the model must invent one."""
    ENUM_NO_ESCAPE = "enum-no-escape"
    """A classification enum with no `unknown` / `other` / `none` member."""
    REASONING_AFTER_ANSWER = "reasoning-after-answer"
    """A reasoning field generated after the answer: the reasoning is post-hoc."""
    PATTERN_ON_FREE_TEXT = "pattern-on-free-text"
    """A regex on prose: the grammar pushes the model off its natural tokens."""
    TIGHT_MAX_LENGTH = "tight-max-length"
    """A short `maxLength` on prose: the text is cut or squeezed."""
    DIALECT_STRIPS = "dialect-strips"
    """A constraint the chosen provider does not enforce (the parser still does)."""
    VOLATILE_TEXT = "volatile-text"
    """A timestamp, UUID or request id in a description: the schema never caches."""
    TOO_LARGE = "too-large"
    """More properties, optional fields, unions or enum values than a provider compiles."""
    TOO_DEEP = "too-deep"
    """Objects nested deeper than a provider accepts."""
    RECURSIVE_SCHEMA = "recursive-schema"
    """A definition that refers to itself, for a provider that compiles no recursion."""
    UNBOUNDED_OUTPUT = "unbounded-output"
    """A list, map or free string with no upper bound on a local target: room for a runaway
    reply."""
    BAD_SUPPRESSION = "bad-suppression"
    """A `lint_ignore` entry with an unknown code, no reason, or a pointer to nothing."""


@dataclass(frozen=True, slots=True)
class Finding:
    """One problem, where it is, and what to do about it."""

    code: LintCode
    pointer: str
    message: str
    fix: str
    provider: str | None = None
    """The provider the finding is about, for provider-specific codes."""

    def __str__(self) -> str:
        return f"{self.pointer or '(root)'}: {self.code.value}: {self.message}"

    def to_json(self) -> dict[str, Any]:
        return {
            "code": self.code.value,
            "pointer": self.pointer,
            "message": self.message,
            "fix": self.fix,
            "provider": self.provider,
        }
