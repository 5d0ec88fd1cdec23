"""Decision: approve, reject or escalate, with the reasoning written first."""

from typing import ClassVar

from pydantic import Field

from sdk import Contract
from sdk import WireEnum
from sdk.contract import LintIgnore


class DecisionAnswer(WireEnum):
    """The outcome; `escalate` is the abstention path when the case is unclear."""

    APPROVE = "approve"
    REJECT = "reject"
    ESCALATE = "escalate"


class Confidence(WireEnum):
    """How sure the model says it is."""

    LOW = "low"
    MEDIUM = "medium"
    HIGH = "high"


class Decision(Contract):
    """A decision on a request, reasoning first."""

    lint_ignore: ClassVar[LintIgnore] = {
        "/properties/reasoning": {
            "unbounded-output": "reasoning is as long as the case needs: a cap would cut the "
            "working short on a hard case; a reasoning that repeats itself is stopped while "
            "streaming (RunawayOutput)",
        },
        "/properties/answer": {
            "enum-no-escape": "escalate is this enum's abstention path: an unclear case goes "
            "to a person instead of being forced into approve or reject",
        },
    }

    reasoning: str = Field(
        description="Work through the case here before answering. Multiple sentences."
    )
    answer: DecisionAnswer = Field(description="The decision. Escalate when unsure.")
    confidence: Confidence = Field(description="How certain the decision is.")
