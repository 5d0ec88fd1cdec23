"""Reference contracts, written the way the reference texts recommend.

Reasoning comes first (JSON generates left to right, so a reasoning field after the answer is
post-hoc), and every contract leaves the model a way to abstain: nullable fields where a
document may not say, an `unknown` member where a classification may not apply, and evidence
quotes that may be empty.
"""

from contracts.decision import Confidence
from contracts.decision import Decision
from contracts.decision import DecisionAnswer
from contracts.invoice import InvoiceCategory
from contracts.invoice import InvoiceExtraction
from contracts.invoice import LineItem
from contracts.notice import ShipmentNotice
from contracts.review import Fix
from contracts.review import ReviewFinding
from contracts.review import Severity
from contracts.sentiment import Sentiment
from contracts.sentiment import SentimentLabel
from contracts.sql import SELECT_QUERY

__all__ = [
    "SELECT_QUERY",
    "Confidence",
    "Decision",
    "DecisionAnswer",
    "Fix",
    "InvoiceCategory",
    "InvoiceExtraction",
    "LineItem",
    "ReviewFinding",
    "Sentiment",
    "SentimentLabel",
    "Severity",
    "ShipmentNotice",
]
