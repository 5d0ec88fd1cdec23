"""Sentiment: a label and a score in [0, 1]."""

from typing import ClassVar

from pydantic import Field

from sdk import Contract
from sdk import WireEnum
from sdk.contract import LintIgnore


class SentimentLabel(WireEnum):
    """The overall tone; `mixed` covers texts that are both."""

    POSITIVE = "positive"
    NEGATIVE = "negative"
    NEUTRAL = "neutral"
    MIXED = "mixed"


class Sentiment(Contract):
    """The sentiment of a text."""

    lint_ignore: ClassVar[LintIgnore] = {
        "/properties/reasoning": {
            "unbounded-output": "the phrases quoted are as many as the text has; reasoning that "
            "repeats itself is stopped while streaming (RunawayOutput)",
        },
        "/properties/sentiment": {
            "enum-no-escape": "neutral and mixed cover every text without one clear tone, so "
            "no input falls outside the four labels",
        },
        "/properties/score": {
            "no-abstention": "every text has a tone, so a strength always exists: a text "
            "without one is neutral with a low score, not missing",
            "dialect-strips": "the parser enforces 0..1 and the wire description states it; "
            "a value outside it is rare and costs one retry",
        },
    }

    reasoning: str = Field(description="The phrases that carry the tone, before the label.")
    sentiment: SentimentLabel = Field(description="The overall sentiment.")
    score: float = Field(ge=0, le=1, description="Strength of the sentiment, 0 to 1.")
