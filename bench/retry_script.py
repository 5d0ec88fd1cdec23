"""Row 4's script, shared by our side (bench/run.py) and instructor's (bench/instructor_retry.py).

An invoice document of about 20 KB (the source, sent in the prompt), and the replies a scripted
model gives for it: two invalid `InvoiceExtraction` documents (a category outside the enum, then
a currency longer than three letters), then a valid one. Deterministic: the same text everywhere.

Two shapes of the same task:
- `"prose"`: a long invoice (terms and conditions, notes) with a dozen line items: the extraction
  (about 1.5 KB) is small beside the source, as extractions usually are;
- `"list-heavy"`: an invoice that is mostly line items, so the extraction is larger than the
  source (JSON repeats every key): the case where resending the previous reply costs the most.

`first_message` is the user turn both sides send first: the prompt and the source, in the form
`StructuredClient.generate(prompt=..., source=...)` writes it (`bench/run.py` checks that).
"""

from __future__ import annotations

import json
import random
from dataclasses import dataclass
from decimal import Decimal
from typing import Literal

from payloads import invoice_value

__all__ = [
    "CHARS_PER_TOKEN",
    "PROMPT",
    "RetryScript",
    "estimate_tokens",
    "first_message",
    "retry_script",
]

PROMPT = "Extract the invoice's facts."
SOURCE_SIZE = 20_000
CHARS_PER_TOKEN = 4
"""The estimate both sides use (the one `sdk.providers.test.TestProvider` reports usage with)."""

_WORDS = [
    "consulting", "hours", "on-site", "support", "licence", "renewal", "travel", "expenses",
    "hardware", "maintenance", "cloud", "hosting", "annual", "subscription", "training",
]  # fmt: skip
_TERMS = (
    "Payment is due within thirty days of the issue date. Late payments accrue interest at the "
    "statutory rate plus eight percentage points. Goods remain our property until paid in full. "
    "Complaints about services must be raised in writing within fourteen days of delivery. "
)

Shape = Literal["prose", "list-heavy"]


def estimate_tokens(chars: int) -> int:
    """Characters to tokens, rounded up: about four characters a token."""
    return max(1, -(-chars // CHARS_PER_TOKEN))


def first_message(source: str) -> str:
    return f"{PROMPT}\n\n<document>\n{source}\n</document>"


@dataclass(frozen=True)
class RetryScript:
    """The source document, and the replies in order (invalid, invalid, valid)."""

    shape: Shape
    source: str
    replies: tuple[str, str, str]

    @property
    def reply_size(self) -> int:
        return len(self.replies[-1])


def retry_script(shape: Shape = "prose") -> RetryScript:
    rng = random.Random(20)
    items: list[dict[str, object]] = []
    lines: list[str] = []
    count = 12 if shape == "prose" else 10_000
    total = Decimal(0)
    for number in range(1, count + 1):
        quantity = rng.randint(1, 12)
        amount = Decimal(rng.randint(100, 50_000)) / 100 * quantity
        words = " ".join(rng.choice(_WORDS) for _ in range(rng.randint(3, 6)))
        description = f"{words.capitalize()} (ref {number:04d})"
        items.append({"description": description, "quantity": quantity, "amount": float(amount)})
        lines.append(f"{description}  x{quantity}  EUR {amount:,.2f}")
        total += amount
        if shape == "list-heavy" and sum(map(len, lines)) >= SOURCE_SIZE - 300:
            break
    evidence = f"Total due: EUR {total:,.2f}"
    head = "ACME INDUSTRIAL SUPPLIES GMBH\nInvoice INV-2026-00417, issued 14 March 2026\n\n"
    body = "\n".join(lines) + f"\n\n{evidence}\n"
    terms = ""
    while len(head) + len(body) + len(terms) < SOURCE_SIZE:
        terms += f"\n{_TERMS}"
    value = invoice_value(items, total, evidence)
    replies = (
        json.dumps({**value, "category": "consulting"}),  # not a member of the enum
        json.dumps({**value, "currency": "Euro"}),  # more than three letters
        json.dumps(value),
    )
    return RetryScript(shape, head + body + terms, replies)
