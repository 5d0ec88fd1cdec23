"""The words that say what a field is for: the schema says nothing of intent, so the linter's
rules and the derived contracts (`widen`, `answer_first`) read field names and enum values.
Extend the lists here, and add a test for the word you add."""

from __future__ import annotations

from typing import Any

from sdk.schema._shape import name_tokens

__all__ = [
    "ANSWER_WORDS",
    "DATE_FORMATS",
    "DATE_SUFFIXES",
    "DATE_WORDS",
    "ESCAPE_MEMBERS",
    "IDENTIFIER_WORDS",
    "PROSE_WORDS",
    "REASONING_WORDS",
    "SCALE_WORDS",
    "is_escape",
]


# Free-text fields where the model thinks: must come before the answer they lead to.
REASONING_WORDS = frozenset(
    {
        "reasoning",
        "reason",
        "reasons",
        "rationale",
        "analysis",
        "explanation",
        "justification",
        "thinking",
        "thoughts",
        "thought",
        "scratchpad",
    }
)
# Fields that commit to an answer.
ANSWER_WORDS = frozenset(
    {
        "answer",
        "decision",
        "label",
        "severity",
        "score",
        "verdict",
        "rating",
        "classification",
        "category",
        "conclusion",
        "prediction",
        "grade",
        "outcome",
    }
)
# Free text: prose whose shape a regex or a short cap would distort.
PROSE_WORDS = REASONING_WORDS | {
    "answer",
    "description",
    "summary",
    "text",
    "comment",
    "comments",
    "note",
    "notes",
    "message",
    "body",
    "content",
    "feedback",
    "details",
    "detail",
    "narrative",
    "quote",
    "quotes",
    "evidence",
    "excerpt",
}
# Enum members that let the model say "none of these".
ESCAPE_MEMBERS = frozenset(
    {
        "unknown",
        "other",
        "none",
        "n/a",
        "na",
        "not_applicable",
        "unclear",
        "undetermined",
        "unspecified",
        "unsure",
        "uncertain",
        "neither",
        "abstain",
    }
)
# Enum fields that grade a degree rather than pick a category: every point of the scale
# applies to every input (the low end is the hedge), so they need no escape member.
SCALE_WORDS = frozenset(
    {
        "confidence",
        "certainty",
        "severity",
        "priority",
        "urgency",
        "level",
        "importance",
        "risk",
        "likelihood",
    }
)
# Values that are often missing from a source document: a date, an identifier.
DATE_WORDS = frozenset({"date", "time", "timestamp", "datetime", "dob", "birthday", "deadline"})
DATE_SUFFIXES = frozenset({"at", "on"})  # created_at, due_on
DATE_FORMATS = frozenset({"date", "date-time", "time"})
IDENTIFIER_WORDS = frozenset(
    {"id", "uuid", "guid", "number", "no", "num", "nr", "sku", "isbn", "iban", "ssn", "ref"}
)


def is_escape(member: Any) -> bool:
    """Whether an enum member means "none of these" (`unknown`, `other`, `n/a`, ...)."""
    if not isinstance(member, str):
        return member is None
    return member.lower() in ESCAPE_MEMBERS or bool(
        set(name_tokens(member)) & {"unknown", "other", "none", "unclear", "unspecified"}
    )
