"""Deterministic bench payloads: realistic model outputs for the reference contracts.

Every payload is valid for its contract and passes every check of `sdk.parse` (line items sum
to the total, the evidence quote is in the source), so the parser runs its whole pipeline.
No randomness from the clock: the same text on every run and every machine.
"""

from __future__ import annotations

import json
import random
from dataclasses import dataclass
from decimal import Decimal

__all__ = ["Payload", "decision", "invoice", "long_string", "with_long_source"]

_WORDS = [
    "consulting", "hours", "on-site", "support", "licence", "renewal", "travel", "expenses",
    "hardware", "maintenance", "cloud", "hosting", "annual", "subscription", "training",
    "workshop", "data", "migration", "security", "audit", "quarterly", "review", "spare",
    "parts", "shipping", "handling", "premium", "tier", "onboarding",
]  # fmt: skip


@dataclass(frozen=True)
class Payload:
    """One bench input: the model's text, and the source document its quotes come from."""

    name: str
    text: str
    source: str | None = None

    @property
    def size(self) -> str:
        return f"{len(self.text) / 1000:.1f} KB"


def long_string(target: int) -> Payload:
    """A Decision of about `target` characters that is nearly all one string (text-heavy)."""
    sentences = []
    while sum(map(len, sentences)) < target:
        sentences.append(f"Sentence {len(sentences)} weighs the request once more.")
    value = {"reasoning": " ".join(sentences), "answer": "escalate", "confidence": "low"}
    return Payload("Decision", json.dumps(value))


def decision(target: int = 500) -> Payload:
    """A Decision of about `target` characters: most of it reasoning, as models write it."""
    rng = random.Random(7)
    sentences: list[str] = []
    while True:
        words = " ".join(rng.choice(_WORDS) for _ in range(9))
        sentences.append(f"The request mentions {words}.")
        value = {"reasoning": " ".join(sentences), "answer": "approve", "confidence": "high"}
        text = json.dumps(value)
        if len(text) >= target:
            return Payload("Decision", text)


def invoice_value(
    items: list[dict[str, object]], total: Decimal, evidence: str
) -> dict[str, object]:
    """The bench invoice's JSON value around its line items (shared with the retry script)."""
    return {
        "vendor": "Acme Industrial Supplies GmbH",
        "invoice_number": "INV-2026-00417",
        "issue_date": "2026-03-14",
        "currency": "EUR",
        "category": "services",
        "line_items": items,
        "total": float(total),
        "evidence": evidence,
    }


def invoice(target: int, *, name: str = "InvoiceExtraction") -> Payload:
    """An InvoiceExtraction of about `target` characters, with its source document.

    Line items make up the bulk (list-heavy), and their amounts sum to the total, so the
    cross-field check and the evidence check both run on every parse.
    """
    rng = random.Random(target)
    items: list[dict[str, object]] = []
    while True:
        quantity = rng.randint(1, 12)
        unit = Decimal(rng.randint(100, 50_000)) / 100
        words = " ".join(rng.choice(_WORDS) for _ in range(rng.randint(3, 7)))
        items.append(
            {
                "description": f"{words.capitalize()} (ref {len(items) + 1:04d})",
                "quantity": quantity,
                "amount": float(unit * quantity),
            }
        )
        total = sum((Decimal(str(item["amount"])) for item in items), Decimal(0))
        evidence = f"Total due: EUR {total:,.2f}"
        value = invoice_value(items, total, evidence)
        text = json.dumps(value)
        if len(text) >= target:
            lines = "\n".join(
                f"{item['description']}  x{item['quantity']}  EUR {item['amount']:,.2f}"
                for item in items
            )
            source = (
                "ACME INDUSTRIAL SUPPLIES GMBH\nInvoice INV-2026-00417, issued 14 March 2026\n\n"
                f"{lines}\n\n{evidence}\nPayable within 30 days.\n"
            )
            return Payload(name, text, source)


_CLAUSES = {
    "en": "Clause {}: deliveries are accepted on working days only, and every claim is made in "
    "writing within fourteen days.",
    "de+zh": "Klausel {}: Lieferungen werden nur an Werktagen angenommen; Mängel sind binnen "
    "vierzehn Tagen schriftlich zu rügen. 交货仅在工作日受理。",
}


def with_long_source(payload: Payload, target: int, language: str = "en") -> Payload:
    """`payload` with its source document grown to about `target` characters: numbered terms
    and conditions before the document (its quotes are still found in it, once), in English or
    in German and Chinese (`"de+zh"`: text that is not ASCII, nor Latin-1)."""
    assert payload.source is not None
    clauses = []
    size = len(payload.source)
    while size < target:
        clause = _CLAUSES[language].format(len(clauses) + 1)
        clauses.append(clause)
        size += len(clause) + 1
    return Payload(payload.name, payload.text, "\n".join([*clauses, payload.source]))
