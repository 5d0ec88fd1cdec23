"""The schema instruction `EmbeddedProvider` puts in the system prompt (pure: no model).

The grammar enforces the form; only the prompt tells the model what each field means. The
instruction lists the top-level fields in generation order with a short type and the field's
own description.
"""

from __future__ import annotations

from contracts import Decision
from contracts import InvoiceExtraction
from contracts import ReviewFinding
from sdk.providers.embedded import schema_instruction


def test_decision_instruction() -> None:
    assert schema_instruction(Decision.json_schema()).splitlines() == [
        "Reply with one JSON object and nothing else. Its fields, in this order:",
        '- "reasoning" (string): Work through the case here before answering. Multiple sentences.',
        '- "answer" ("approve", "reject" or "escalate"): The decision. Escalate when unsure.',
        '- "confidence" ("low", "medium" or "high"): How certain the decision is.',
        'Format: {"reasoning": ..., "answer": ..., "confidence": ...}',
    ]


def test_nullable_nested_and_array_fields() -> None:
    invoice = schema_instruction(InvoiceExtraction.json_schema())
    assert '- "vendor" (string or null): Who issued the invoice, or null.' in invoice
    assert (
        '- "line_items" (list of object with "description", "quantity", "amount"): '
        "Every line item, in document order."
    ) in invoice
    review = schema_instruction(ReviewFinding.json_schema())
    assert '- "line" (integer or null):' in review
    assert '- "fix" (object with "description", "confident" or null):' in review
