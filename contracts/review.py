"""ReviewFinding: one code review finding, with an optional fix."""

from typing import ClassVar

from pydantic import Field

from sdk import Contract
from sdk import WireEnum
from sdk.contract import LintIgnore


class Severity(WireEnum):
    """How much the finding matters."""

    INFO = "info"
    WARNING = "warning"
    ERROR = "error"


class Fix(Contract):
    """A proposed fix, and whether the model is confident it is right."""

    lint_ignore: ClassVar[LintIgnore] = {
        "/properties/description": {
            "unbounded-output": "a fix is as long as the change it describes; a description "
            "that repeats itself is stopped while streaming (RunawayOutput)",
        },
    }

    description: str = Field(description="What to change, concretely.")
    confident: bool = Field(description="False when the fix is a guess.")


class ReviewFinding(Contract):
    """A finding about one file, or one line of it."""

    lint_ignore: ClassVar[LintIgnore] = {
        "/properties/reasoning": {
            "unbounded-output": "the reasoning is as long as the problem needs; one that repeats "
            "itself is stopped while streaming (RunawayOutput)",
        },
        "/properties/file": {
            "unbounded-output": "paths have no natural limit worth pinning in the schema; a "
            "path that repeats itself is stopped while streaming (RunawayOutput)",
        },
        "/properties/line": {
            "dialect-strips": "the parser rejects a line below 1; a model writing line numbers "
            "almost never produces one, so the rare retry is cheaper than dropping the bound",
        },
    }

    reasoning: str = Field(description="Why this is a problem, before judging its severity.")
    severity: Severity = Field(description="info, warning or error.")
    file: str = Field(description="Path of the file the finding is about.")
    line: int | None = Field(
        ge=1, description="1-based line number, or null for a finding about the whole file."
    )
    fix: Fix | None = Field(description="A proposed fix, or null when there is none.")
