"""InvoiceExtraction: fields from an invoice, nullable where a document may not state them."""

from decimal import Decimal
from typing import Any
from typing import ClassVar

from pydantic import Field
from pydantic import ValidationInfo
from pydantic import model_validator

from sdk import Contract
from sdk import SourceQuote
from sdk import WireEnum
from sdk.contract import LintIgnore

# Rounding slack when comparing the line items' sum with the stated total.
_CENT = Decimal("0.01")


class InvoiceCategory(WireEnum):
    """What the invoice is for; `unknown` when the document does not make it clear."""

    GOODS = "goods"
    SERVICES = "services"
    SUBSCRIPTION = "subscription"
    UTILITIES = "utilities"
    TRAVEL = "travel"
    UNKNOWN = "unknown"


class LineItem(Contract):
    """One line of the invoice."""

    lint_ignore: ClassVar[LintIgnore] = {
        "/properties/description": {
            "unbounded-output": "a line's text is copied as the invoice writes it, however long; "
            "a text that repeats itself is stopped while streaming (RunawayOutput)",
        },
        "/properties/quantity": {
            "dialect-strips": "the parser rejects a negative quantity; invoices do not state "
            "them, so the rare retry is cheaper than dropping the bound",
        },
    }

    description: str = Field(description="The line's text as written.")
    quantity: float | None = Field(ge=0, description="Quantity, or null if not stated.")
    amount: float | None = Field(description="Line total, or null if not stated.")


class InvoiceExtraction(Contract):
    """The facts of one invoice. Null means the document does not say."""

    lint_ignore: ClassVar[LintIgnore] = {
        **{
            f"/properties/{name}/anyOf/0": {
                "unbounded-output": "copied from the invoice as it is written, however long; a "
                "value that repeats itself is stopped while streaming (RunawayOutput)",
            }
            for name in ("vendor", "invoice_number")
        },
        "/properties/evidence": {
            "unbounded-output": "a quote of the invoice: the source check holds it to a span of "
            "the document, and targets that ground quotes bound it by the source while decoding",
        },
        "/properties/line_items": {
            "unbounded-output": "an invoice has as many lines as it has; a list that repeats "
            "itself is stopped while streaming (RunawayOutput)",
        },
        "/properties/issue_date": {
            "dialect-strips": "the parser enforces YYYY-MM-DD and the wire description states "
            "the pattern; dates are copied from the document, so misses are rare",
        },
        "/properties/currency": {
            "dialect-strips": "the parser enforces three letters and the description asks for "
            "an ISO 4217 code; a longer answer is rare and costs one retry",
        },
    }

    vendor: str | None = Field(description="Who issued the invoice, or null.")
    invoice_number: str | None = Field(description="The invoice's own number, or null.")
    issue_date: str | None = Field(
        pattern=r"^[0-9]{4}-[0-9]{2}-[0-9]{2}$",
        description="Issue date as YYYY-MM-DD, or null.",
    )
    currency: str | None = Field(
        min_length=3, max_length=3, description="ISO 4217 code such as EUR, or null."
    )
    category: InvoiceCategory = Field(description="What the invoice is for; unknown if unclear.")
    line_items: list[LineItem] = Field(description="Every line item, in document order.")
    total: float | None = Field(description="The invoice total, or null if not stated.")
    evidence: SourceQuote = Field(
        description="A verbatim sentence or line from the invoice that states the total, "
        "copied exactly; empty if there is none."
    )

    @model_validator(mode="after")
    def _line_items_sum_to_total(self, info: ValidationInfo) -> "InvoiceExtraction":
        amounts = [item.amount for item in self.line_items]
        if self.total is None or not amounts or any(a is None for a in amounts):
            return self
        stated = Decimal(str(self.total))
        summed = sum((Decimal(str(a)) for a in amounts if a is not None), Decimal(0))
        if abs(summed - stated) > _CENT:
            raise ValueError(f"line items sum to {summed} but the total is {stated}")
        return self

    @classmethod
    def example(cls) -> dict[str, Any]:
        """A valid value's JSON form, for documentation and tests."""
        return {
            "vendor": "Acme GmbH",
            "invoice_number": "INV-1042",
            "issue_date": "2026-03-14",
            "currency": "EUR",
            "category": "services",
            "line_items": [
                {"description": "Consulting", "quantity": 10, "amount": 1200.0},
                {"description": "Travel", "quantity": 1, "amount": 80.5},
            ],
            "total": 1280.5,
            "evidence": "Total due: EUR 1,280.50",
        }
