"""Sentiment: a label and a score in [0, 1]."""

from pydantic import Field

from sdk import Contract, WireEnum


class SentimentLabel(WireEnum):
    """The overall tone; `mixed` covers texts that are both."""

    POSITIVE = "positive"
    NEGATIVE = "negative"
    NEUTRAL = "neutral"
    MIXED = "mixed"


class Sentiment(Contract):
    """The sentiment of a text."""

    reasoning: str = Field(description="The phrases that carry the tone, before the label.")
    sentiment: SentimentLabel = Field(description="The overall sentiment.")
    score: float = Field(ge=0, le=1, description="Strength of the sentiment, 0 to 1.")
