"""Write the eval datasets: `invoices.jsonl` (InvoiceExtraction), `decisions.jsonl` (Decision),
and `notices.jsonl` with `notices-calibration.jsonl` (ShipmentNotice).

    python examples/data/eval/make_datasets.py          # rewrites every file, byte for byte
    python examples/data/eval/make_datasets.py DIR      # writes them into DIR instead

Deterministic (one seeded `random.Random`), written for this project, nothing scraped. Every
label is computed from the same values the document is printed from, so a label cannot drift
from its document:

- invoices: six layouts (supplier invoice, freelancer e-mail, SaaS receipt, utility bill, hotel
  folio, bare payment request), several date and money styles; about a third leave out one or
  more labelled fields (no invoice number, no date, no currency, no total, no vendor), labelled
  `null`: the right answer there is to abstain;
- decisions: ten kinds of policy and request whose answer needs a comparison or a small
  calculation (nights times a cap, days between two dates, a discount percentage, a
  debt-to-income ratio, ...), labelled with the policy's own outcome, `escalate` included where
  the policy says so;
- notices: six kinds of shipping notice (carrier e-mail, shop dispatch confirmation, missed
  delivery card, text message, customs charge notice, delivery confirmation) whose values are
  copied exactly (carrier, tracking number, order number, recipient's name), each left out of
  about a third of the notices (labelled `null`), among other names and numbers that are not
  the answer (the shop, a signature, a customer number, dates, weights, phone numbers). Two
  files from one generator: `notices.jsonl` (60 items, the eval) and `notices-calibration.jsonl`
  (40 more, for calibrating an abstention threshold out of sample). They have their own seeded
  generator, so adding them left the other two files byte for byte as they were.
"""

from __future__ import annotations

import json
import random
import sys
from collections.abc import Callable
from dataclasses import dataclass
from datetime import date
from datetime import timedelta
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
SEED = 20260314

INVOICE_PROMPT = "Extract the invoice fields from this document."
DECISION_PROMPT = (
    "Decide on this request by applying the policy to the numbers given: approve, reject, or "
    "escalate where the policy says so."
)

MONTHS = [
    "January", "February", "March", "April", "May", "June",
    "July", "August", "September", "October", "November", "December",
]  # fmt: skip


# --- money and dates, as documents print them ----------------------------------------------


def money(amount: float, currency: str | None, style: str) -> str:
    """An amount as a document would print it; `currency=None` prints a bare number."""
    if style == "de":  # 1.234,50 EUR
        text = f"{amount:,.2f}".replace(",", "_").replace(".", ",").replace("_", ".")
        return f"{text} {currency}" if currency else text
    text = f"{amount:,.2f}"
    if currency is None:
        return text
    symbol = {"USD": "$", "GBP": "£", "EUR": "€"}.get(currency)
    if style == "symbol" and symbol:
        return f"{symbol}{text}"
    return f"{currency} {text}"


def day(value: date, style: str) -> str:
    month = MONTHS[value.month - 1]
    return {
        "iso": value.isoformat(),
        "long": f"{value.day} {month} {value.year}",
        "us": f"{month} {value.day}, {value.year}",
        "dots": f"{value.day:02d}.{value.month:02d}.{value.year}",
        "slash": f"{value.month:02d}/{value.day:02d}/{value.year}",
    }[style]


@dataclass
class Line:
    description: str
    quantity: float | None
    amount: float


# --- invoices ------------------------------------------------------------------------------

SUPPLIERS = [
    ("Northwind Office Supplies Ltd.", "GBP", "London"),
    ("Brandt & Söhne Bürotechnik GmbH", "EUR", "Hamburg"),
    ("Cascade Lab Equipment Inc.", "USD", "Portland, OR"),
    ("Tipografia Venturi S.r.l.", "EUR", "Bologna"),
    ("Hollis Hardware Co.", "USD", "Columbus, OH"),
    ("Nordkap Verpackung AG", "EUR", "Bremen"),
    ("Pemberton Catering Supplies", "GBP", "Leeds"),
    ("Atelier Lumière SARL", "EUR", "Lyon"),
]
GOODS = [
    ("A4 copy paper, box of 5", 24.0), ("Toner cartridge, black", 89.0),
    ("Ergonomic office chair", 249.0), ("Label printer tape, 12 mm", 14.5),
    ("Nitrile gloves, box of 100", 11.2), ("Pipette tips, rack of 96", 7.8),
    ("Shipping cartons, 40x30x30, bundle of 20", 32.0), ("Stainless steel shelving unit", 310.0),
    ("USB-C docking station", 129.0), ("Whiteboard markers, set of 8", 9.9),
    ("Cordless drill 18V", 145.0), ("Safety goggles", 6.4), ("Catering trays, pack of 50", 18.75),
    ("Brochure print run, 500 copies", 420.0), ("Bubble wrap roll, 50 m", 21.0),
]  # fmt: skip
FREELANCERS = [
    ("Maren Olsen", "Copyediting", "EUR"),
    ("Tomás Ferreira Design", "Logo and brand guidelines", "EUR"),
    ("Priya Natarajan", "Data analysis consulting", "GBP"),
    ("Jonah Whitaker", "Website maintenance", "USD"),
    ("Studio Keller", "Product photography", "EUR"),
    ("Ana Lucía Restrepo", "Spanish translation", "USD"),
]
SERVICE_TASKS = [
    "Workshop preparation", "On-site session", "Revisions (second round)", "Project management",
    "Travel time", "Report writing", "Follow-up call", "Asset delivery and handover",
]  # fmt: skip
SAAS = [
    ("Linear Orbit, Inc.", "Team plan", "USD"),
    ("Kontor Cloud GmbH", "Business seats", "EUR"),
    ("Paperwell Ltd", "Document signing, Pro", "GBP"),
    ("Fathom Metrics, Inc.", "Analytics Growth tier", "USD"),
    ("Tallyhoe AB", "Payroll module", "EUR"),
]
UTILITIES = [
    ("Stadtwerke Lindau", "Electricity", "EUR"),
    ("Thames Valley Water", "Water and sewerage", "GBP"),
    ("Pacific Gas Cooperative", "Natural gas", "USD"),
    ("Enercoop Bretagne", "Électricité", "EUR"),
]
HOTELS = [
    ("Hotel Amsel Wien", "EUR", "Vienna"),
    ("The Harbour Inn", "GBP", "Bristol"),
    ("Lakeside Lodge Chicago", "USD", "Chicago"),
    ("Albergo Ponte Vecchio", "EUR", "Florence"),
]
CLIENTS = [
    "Contoso Robotics GmbH, Berlin", "Fabrikam Foods Ltd, Manchester", "Tailspin Toys Inc.",
    "Wingtip Analytics BV, Utrecht", "Proseware Health, Boston", "Litware Labs SAS, Nantes",
]  # fmt: skip


@dataclass
class Invoice:
    vendor: str | None
    number: str | None
    issued: date | None
    currency: str | None
    category: str | None  # None: the document does not make it clear
    lines: list[Line]
    total_stated: bool

    @property
    def total(self) -> float:
        return round(sum(line.amount for line in self.lines), 2)

    def labels(self) -> dict[str, Any]:
        return {
            "vendor": self.vendor,
            "invoice_number": self.number,
            "issue_date": self.issued.isoformat() if self.issued else None,
            "currency": self.currency,
            "category": self.category,
            "total": self.total if self.total_stated else None,
        }


def _issue_date(rng: random.Random) -> date:
    return date(2025, 9, 1) + timedelta(days=rng.randrange(0, 240))


def _omit(rng: random.Random, invoice: Invoice, chances: dict[str, float]) -> Invoice:
    """Leave fields out of the document (and so label them null)."""
    if rng.random() < chances.get("number", 0):
        invoice.number = None
    if rng.random() < chances.get("date", 0):
        invoice.issued = None
    if rng.random() < chances.get("currency", 0):
        invoice.currency = None
    if rng.random() < chances.get("total", 0):
        invoice.total_stated = False
    if rng.random() < chances.get("vendor", 0):
        invoice.vendor = None
    return invoice


def supplier_invoice(rng: random.Random, sparse: bool) -> tuple[str, Invoice]:
    vendor, currency, city = rng.choice(SUPPLIERS)
    picked = rng.sample(GOODS, rng.randint(2, 4))
    lines = []
    for name, price in picked:
        quantity = rng.randint(1, 12)
        lines.append(Line(name, float(quantity), round(price * quantity, 2)))
    prefix = "".join(word[0] for word in vendor.split()[:2]).upper()
    invoice = Invoice(
        vendor, f"{prefix}-{rng.randint(10000, 99999)}", _issue_date(rng), currency,
        "goods", lines, True,
    )  # fmt: skip
    if sparse:
        _omit(rng, invoice, {"number": 0.5, "date": 0.4, "currency": 0.35, "total": 0.4})
    style = "de" if currency == "EUR" and rng.random() < 0.5 else rng.choice(["code", "symbol"])
    date_style = "dots" if style == "de" else rng.choice(["iso", "long", "us"])
    out = [vendor.upper() if rng.random() < 0.4 else vendor, city, ""]
    out.append("INVOICE" if rng.random() < 0.6 else "Tax invoice")
    if invoice.number:
        out.append(
            f"{rng.choice(['Invoice number', 'Invoice no.', 'Invoice #'])}: {invoice.number}"
        )
    if invoice.issued:
        out.append(f"{rng.choice(['Issue date', 'Date', 'Invoice date'])}: "
                   f"{day(invoice.issued, date_style)}")  # fmt: skip
    out.append(f"Bill to: {rng.choice(CLIENTS)}")
    out += ["", f"{'Description':<42}{'Qty':>5}   Amount"]
    for line in lines:
        out.append(f"{line.description:<42}{int(line.quantity or 0):>5}   "
                   f"{money(line.amount, invoice.currency, style)}")  # fmt: skip
    out.append("")
    if invoice.total_stated:
        label = rng.choice(["Total due", "Total", "Amount due", "Balance due"])
        out.append(f"{label}: {money(invoice.total, invoice.currency, style)}")
    out.append(rng.choice([
        "Payment within 30 days.", "Please pay by bank transfer within 14 days.",
        "Thank you for your business.", "Goods remain our property until paid in full.",
    ]))  # fmt: skip
    return "\n".join(out), invoice


def freelancer_email(rng: random.Random, sparse: bool) -> tuple[str, Invoice]:
    name, work, currency = rng.choice(FREELANCERS)
    tasks = rng.sample(SERVICE_TASKS, rng.randint(1, 3))
    rate = rng.choice([45, 60, 75, 90, 110])
    lines = []
    for task in tasks:
        hours = rng.choice([1.5, 2, 3, 4, 6, 8, 10])
        lines.append(Line(f"{work}: {task.lower()}", float(hours), round(hours * rate, 2)))
    number = f"{rng.randint(2025, 2026)}-{rng.randint(1, 99):03d}"
    invoice = Invoice(name, number, _issue_date(rng), currency, "services", lines, True)
    if sparse:
        _omit(rng, invoice, {"number": 0.6, "date": 0.5, "currency": 0.3, "total": 0.3})
    first = rng.choice(["Hi Sam", "Dear Ms. Laurent", "Hello accounts team", "Hi Jordan"])
    out = [f"Subject: {'Invoice ' + invoice.number if invoice.number else 'Invoice for ' + work}",
           "", f"{first},", ""]  # fmt: skip
    when = (
        f" dated {day(invoice.issued, rng.choice(['long', 'us', 'iso']))}" if invoice.issued else ""
    )
    ref = f" (invoice {invoice.number})" if invoice.number else ""
    out.append(f"please find below my invoice{ref}{when} for the {work.lower()} work.")
    out.append("")
    for line in lines:
        out.append(f"- {line.description}: {line.quantity:g} h at {rate}/h = "
                   f"{money(line.amount, invoice.currency, 'symbol')}")  # fmt: skip
    if invoice.total_stated:
        out += ["", f"Total: {money(invoice.total, invoice.currency, 'symbol')}"]
    out += ["", "Bank details are unchanged. Many thanks!", "", "Best regards,", name]
    return "\n".join(out), invoice


def saas_receipt(rng: random.Random, sparse: bool) -> tuple[str, Invoice]:
    vendor, plan, currency = rng.choice(SAAS)
    seats = rng.randint(3, 40)
    per_seat = rng.choice([8.0, 12.0, 15.0, 19.0, 24.0])
    lines = [Line(f"{plan}, {seats} seats, monthly", float(seats), round(seats * per_seat, 2))]
    if rng.random() < 0.4:
        lines.append(Line("Extra storage, 100 GB", 1.0, rng.choice([5.0, 10.0, 20.0])))
    number = f"{rng.randint(1000, 9999)}-{rng.randint(1000, 9999)}"
    invoice = Invoice(vendor, number, _issue_date(rng), currency, "subscription", lines, True)
    if sparse:
        _omit(rng, invoice, {"number": 0.5, "date": 0.4, "total": 0.2, "currency": 0.2})
    out = [f"Receipt from {vendor}"]
    if invoice.number:
        out.append(f"Receipt #{invoice.number}")
    if invoice.issued:
        out.append(f"Date paid: {day(invoice.issued, 'us')}")
    out += ["Payment method: Visa ending in " + str(rng.randint(1000, 9999)), "", "Summary"]
    for line in lines:
        out.append(f"  {line.description:<44}{money(line.amount, invoice.currency, 'symbol')}")
    if invoice.total_stated:
        out.append(f"  {'Amount paid':<44}{money(invoice.total, invoice.currency, 'code')}")
    out += ["", "Questions? Reply to this e-mail or visit the billing page in your workspace."]
    return "\n".join(out), invoice


def utility_bill(rng: random.Random, sparse: bool) -> tuple[str, Invoice]:
    vendor, what, currency = rng.choice(UTILITIES)
    usage = rng.randint(120, 900)
    price = rng.choice([0.21, 0.27, 0.32, 0.35])
    lines = [
        Line(f"{what}, {usage} units", float(usage), round(usage * price, 2)),
        Line("Standing charge", None, rng.choice([9.5, 12.0, 14.8])),
    ]
    number = f"{rng.randint(100000, 999999)}"
    invoice = Invoice(vendor, number, _issue_date(rng), currency, "utilities", lines, True)
    if sparse:
        _omit(rng, invoice, {"number": 0.5, "date": 0.5, "total": 0.3})
    style = "de" if currency == "EUR" else "code"
    out = [vendor, "Your bill", ""]
    out.append(f"Customer account: {rng.randint(10**7, 10**8 - 1)}")
    if invoice.number:
        out.append(f"Bill number: {invoice.number}")
    if invoice.issued:
        out.append(f"Bill date: {day(invoice.issued, 'dots' if style == 'de' else 'long')}")
    start = (invoice.issued or date(2026, 1, 31)) - timedelta(days=60)
    out.append(f"Billing period: {day(start, 'long')} to {day(start + timedelta(days=30), 'long')}")
    out.append("")
    for line in lines:
        out.append(f"{line.description:<36}{money(line.amount, invoice.currency, style)}")
    if invoice.total_stated:
        out.append(f"{'Amount due':<36}{money(invoice.total, invoice.currency, style)}")
    out += ["", "We will collect this amount by direct debit."]
    return "\n".join(out), invoice


def hotel_folio(rng: random.Random, sparse: bool) -> tuple[str, Invoice]:
    vendor, currency, city = rng.choice(HOTELS)
    nights = rng.randint(1, 5)
    rate = rng.choice([98.0, 119.0, 135.0, 160.0, 189.0])
    lines = [Line(f"Room, {nights} night(s) at {rate:.2f}", float(nights), round(nights * rate, 2))]
    if rng.random() < 0.6:
        lines.append(Line("Breakfast", float(nights), round(nights * 16.5, 2)))
    if rng.random() < 0.4:
        lines.append(Line("City tax", float(nights), round(nights * 3.2, 2)))
    arrival = _issue_date(rng)
    invoice = Invoice(
        vendor, f"F{rng.randint(10000, 99999)}", arrival + timedelta(days=nights), currency,
        "travel", lines, True,
    )  # fmt: skip
    if sparse:
        _omit(rng, invoice, {"number": 0.5, "date": 0.6, "currency": 0.3})
    out = [vendor, city, "", "GUEST FOLIO"]
    if invoice.number:
        out.append(f"Folio no.: {invoice.number}")
    if invoice.issued:
        out.append(f"Arrival: {day(arrival, 'long')}    Departure: {day(invoice.issued, 'long')}")
        out.append(f"Printed: {day(invoice.issued, 'iso')}")
    out.append("")
    for line in lines:
        out.append(f"{line.description:<38}{money(line.amount, invoice.currency, 'code')}")
    if invoice.total_stated:
        out.append(f"{'Balance':<38}{money(invoice.total, invoice.currency, 'code')}")
    out += ["", "Thank you for staying with us."]
    return "\n".join(out), invoice


def payment_request(rng: random.Random, sparse: bool) -> tuple[str, Invoice]:
    """A bare request for payment: what it is for is not said (category unknown)."""
    amount = float(rng.choice([150, 240, 385, 600, 1250]))
    who = rng.choice(["R. Castellano", "K. Mbeki", "Lindqvist Holding", None])
    number = f"PR{rng.randint(100, 999)}" if rng.random() < 0.5 else None
    issued = _issue_date(rng) if rng.random() < 0.5 else None
    currency = rng.choice(["EUR", "USD", None])
    invoice = Invoice(who, number, issued, currency, None, [Line("As agreed", None, amount)], True)
    out = ["PAYMENT REQUEST", ""]
    if invoice.number:
        out.append(f"Reference: {invoice.number}")
    if invoice.issued:
        out.append(f"Date: {day(invoice.issued, 'long')}")
    out += ["", f"Amount: {money(amount, currency, 'code')} as agreed.", ""]
    out.append(f"Please transfer to the usual account.{' ' + who if who else ''}")
    return "\n".join(out), invoice


LAYOUTS: list[Callable[[random.Random, bool], tuple[str, Invoice]]] = [
    supplier_invoice, freelancer_email, saas_receipt, utility_bill, hotel_folio,
]  # fmt: skip


def invoices(rng: random.Random, count: int = 64) -> list[dict[str, Any]]:
    rows = []
    for index in range(count):
        if index % 16 == 15:
            document, invoice = payment_request(rng, True)
        else:
            layout = LAYOUTS[index % len(LAYOUTS)]
            document, invoice = layout(rng, index % 3 == 1)
        rows.append({
            "id": f"inv-{index + 1:03d}",
            "document": document,
            "prompt": INVOICE_PROMPT,
            "expected": invoice.labels(),
        })  # fmt: skip
    return rows


# --- decisions -----------------------------------------------------------------------------

NAMES = [
    "Dana Whitfield", "Omar Haddad", "Lena Vogt", "Kenji Mori", "Grace Adeyemi", "Marco Bellini",
    "Sofia Lindgren", "Ravi Menon", "Chloé Martin", "Ben Okafor", "Ines Duarte", "Paul Novak",
]  # fmt: skip


PRODUCTS = ["wireless headphones", "standing desk", "coffee grinder", "rain jacket"]
STOCK_ITEMS = ["M6 hex bolts", "thermal labels", "pallet wrap", "fuse 10A"]
PURCHASES = ["a conference booth", "user research incentives", "two laptops", "a training course"]


def hotel_cap(rng: random.Random) -> tuple[str, str]:
    cap = rng.choice([150, 180, 220])
    nights = rng.randint(2, 6)
    per_night = cap + rng.choice([-40, -15, -5, 10, 25, 60])
    claimed = per_night * nights
    answer = "approve" if per_night <= cap else "reject"
    doc = (f"Policy: hotel costs are reimbursed up to EUR {cap} per night; claims above the "
           f"nightly cap are rejected.\n\nExpense claim from {rng.choice(NAMES)}\n"
           f"Hotel stay in Lisbon, {nights} nights.\nAmount claimed: EUR {claimed:,}\n"
           "Receipt attached: yes")  # fmt: skip
    return doc, answer


def refund_window(rng: random.Random) -> tuple[str, str]:
    window = rng.choice([14, 30, 60])
    bought = date(2026, 1, 1) + timedelta(days=rng.randrange(0, 120))
    elapsed = window + rng.choice([-9, -2, 0, 1, 5, 20])
    asked = bought + timedelta(days=elapsed)
    answer = "approve" if elapsed <= window else "reject"
    doc = (f"Policy: a refund is granted when it is requested within {window} days of purchase "
           f"(the day of purchase counts as day 0).\n\nOrder #{rng.randint(10000, 99999)}\n"
           f"Purchased: {day(bought, 'long')}\nRefund requested: {day(asked, 'long')}\n"
           f"Item: {rng.choice(PRODUCTS)}, "
           "unused, original packaging.")  # fmt: skip
    return doc, answer


def per_diem(rng: random.Random) -> tuple[str, str]:
    rate = rng.choice([28, 35, 42])
    days = rng.randint(2, 7)
    allowed = rate * days
    claimed = allowed + rng.choice([-20, -6, 0, 7, 30])
    answer = "approve" if claimed <= allowed else "reject"
    doc = (f"Policy: meals are covered by a per diem of USD {rate} per travel day. A meal claim "
           "may not exceed the per diem times the number of travel days.\n\n"
           f"Traveller: {rng.choice(NAMES)}\nTrip: {days} travel days (customer visits)\n"
           f"Meals claimed: USD {claimed}")  # fmt: skip
    return doc, answer


def discount(rng: random.Random) -> tuple[str, str]:
    price = rng.choice([2000, 4500, 8000, 12000])
    percent = rng.choice([5, 10, 14, 18, 22, 30, 35])
    offered = round(price * (1 - percent / 100))
    answer = "approve" if percent <= 15 else "escalate" if percent <= 25 else "reject"
    doc = ("Policy: sales staff may grant discounts of up to 15% off list price. Discounts above "
           "15% and up to 25% go to the sales director (escalate). Discounts above 25% are not "
           f"allowed.\n\nDeal desk request\nCustomer: {rng.choice(CLIENTS)}\n"
           f"List price: GBP {price:,}\nProposed price: GBP {offered:,}")  # fmt: skip
    return doc, answer


def overtime(rng: random.Random) -> tuple[str, str]:
    hours = [rng.choice([8, 9, 10, 11, 12]) for _ in range(5)]
    weekend = rng.choice([0, 0, 4, 6])
    total = sum(hours) + weekend
    answer = "approve" if total <= 48 else "reject"
    days = ", ".join(
        f"{d} {h} h" for d, h in zip(["Mon", "Tue", "Wed", "Thu", "Fri"], hours, strict=True)
    )
    doc = ("Policy: working time including overtime may not exceed 48 hours in a week; overtime "
           f"requests that would exceed it are rejected.\n\nOvertime request, {rng.choice(NAMES)}\n"
           f"Planned hours this week: {days}"
           f"{f', Sat {weekend} h' if weekend else ''}.")  # fmt: skip
    return doc, answer


def debt_ratio(rng: random.Random) -> tuple[str, str]:
    income = rng.choice([3200, 4100, 5000, 6400])
    ratio = rng.choice([0.22, 0.30, 0.35, 0.39, 0.42, 0.47, 0.55])
    debts = round(income * ratio)
    answer = (
        "approve" if debts / income <= 0.36 else "escalate" if debts / income <= 0.43 else "reject"
    )
    doc = ("Policy: approve a loan when monthly debt payments (including the new loan) are at "
           "most 36% of gross monthly income; from above 36% up to 43% refer to an underwriter "
           "(escalate); above 43% reject.\n\nApplicant: "
           f"{rng.choice(NAMES)}\nGross monthly income: USD {income:,}\n"
           f"Monthly debt payments with the new loan: USD {debts:,}")  # fmt: skip
    return doc, answer


def mileage(rng: random.Random) -> tuple[str, str]:
    rate = rng.choice([0.30, 0.42, 0.45])
    km = rng.randint(60, 600)
    allowed = round(km * rate, 2)
    claimed = round(allowed + rng.choice([-10.0, 0.0, 0.0, 12.5, 40.0]), 2)
    answer = "approve" if claimed <= allowed + 0.005 else "reject"
    doc = (f"Policy: private car use is reimbursed at EUR {rate:.2f} per km. A claim for more "
           "than the distance times the rate is rejected.\n\nMileage claim, "
           f"{rng.choice(NAMES)}\nDistance driven: {km} km\n"
           f"Amount claimed: EUR {claimed:.2f}")  # fmt: skip
    return doc, answer


def reorder(rng: random.Random) -> tuple[str, str]:
    point = rng.choice([50, 80, 120])
    stock = rng.randint(60, 260)
    committed = rng.randint(0, 180)
    available = stock - committed
    answer = "approve" if available < point else "reject"
    doc = ("Policy: approve a purchase order only when available stock (on hand minus committed "
           f"to open orders) is below the reorder point of {point} units; otherwise reject it.\n\n"
           f"Purchase order request: {rng.choice(STOCK_ITEMS)}\n"
           f"On hand: {stock} units\nCommitted to open orders: {committed} units")  # fmt: skip
    return doc, answer


def age_check(rng: random.Random) -> tuple[str, str]:
    event = date(2026, 6, 20)
    age_days = 18 * 365 + rng.choice([-200, -20, -3, 10, 400, 2000])
    born = event - timedelta(days=age_days)
    turns_18 = date(
        born.year + 18, born.month, born.day if (born.month, born.day) != (2, 29) else 28
    )
    answer = "approve" if turns_18 <= event else "reject"
    doc = ("Policy: registration for the evening wine tasting is open to people who are 18 or "
           f"older on the day of the event, {day(event, 'long')}.\n\nRegistration: "
           f"{rng.choice(NAMES)}\nDate of birth: {day(born, 'long')}")  # fmt: skip
    return doc, answer


def budget(rng: random.Random) -> tuple[str, str]:
    total = rng.choice([20000, 35000, 50000])
    spent = rng.randint(int(total * 0.5), int(total * 0.97))
    remaining = total - spent
    request = max(100, remaining + rng.choice([-3000, -500, -50, 200, 1500]))
    answer = "approve" if request <= remaining else "reject"
    if rng.random() < 0.25:
        answer = "escalate"
        tail = "\nNote: the budget owner has not confirmed the spent figure (policy: escalate)."
    else:
        tail = ""
    doc = ("Policy: a spending request is approved when it fits in the remaining team budget "
           "(annual budget minus spent so far), else rejected. When the spent figure is "
           "unconfirmed, escalate.\n\n"
           f"Team budget 2026: EUR {total:,}\nSpent so far: EUR {spent:,}\n"
           f"Request: EUR {request:,} for {rng.choice(PURCHASES)}"
           f"{tail}")  # fmt: skip
    return doc, answer


CASES = [
    hotel_cap, refund_window, per_diem, discount, overtime, debt_ratio, mileage, reorder,
    age_check, budget,
]  # fmt: skip


# Cases whose policy has an escalation path; the others only approve or reject.
THREE_WAY = {discount, debt_ratio, budget}


def decisions(rng: random.Random, count: int = 44) -> list[dict[str, Any]]:
    """Each kind of case in turn, its answers balanced: a case is drawn until its answer is the
    one this slot needs, so that always answering `approve` scores no better than chance."""
    rows = []
    for index in range(count):
        case = CASES[index % len(CASES)]
        round_ = index // len(CASES)
        if case in THREE_WAY:
            target = ("approve", "reject", "escalate")[(round_ + index) % 3]
        else:
            target = ("approve", "reject")[(round_ + index) % 2]
        for _ in range(1000):
            document, answer = case(rng)
            if answer == target:
                break
        else:  # pragma: no cover - every case reaches every answer it has
            raise RuntimeError(f"{case.__name__} never answered {target}")
        rows.append({
            "id": f"dec-{index + 1:03d}",
            "document": document,
            "prompt": DECISION_PROMPT,
            "expected": {"answer": answer},
        })  # fmt: skip
    return rows


# --- notices -------------------------------------------------------------------------------

NOTICE_SEED = 20260323
NOTICE_PROMPT = (
    "Fill in the fields from this shipping notice. Copy each value exactly as the notice writes "
    "it; use null for anything the notice does not say."
)
CARRIERS = ["UPS", "Royal Mail", "DHL Parcel", "FedEx", "La Poste", "PostNL", "Deutsche Post"]
RECIPIENTS = [
    "Ana Lucía Restrepo", "Jonah Whitaker", "Priya Natarajan", "Lena Vogt", "Kenji Mori",
    "Grace Adeyemi", "Chloé Martin", "Ben Okafor", "Sofia Lindgren", "Omar Haddad",
    "Maren Olsen", "Tomás Ferreira", "Ines Duarte", "Paul Novak",
]  # fmt: skip
SHOPS = [
    ("Northwind Outdoor", "NWO"), ("Fabrikam Home", "FH"), ("Lumen Books", "LB"),
    ("Tailspin Toys", "TT"), ("Contoso Kitchen", "CK"), ("Wingtip Cycles", "WC"),
]  # fmt: skip
SIGNATURES = ["Maren from the Northwind team", "Dev Patel, Customer Care", "Julia", "The team"]
CITIES = ["Leeds", "Utrecht", "Lyon", "Hamburg", "Bristol", "Bologna"]
ALPHANUMERIC = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZ"


@dataclass
class Notice:
    carrier: str | None
    tracking: str | None
    order: str | None
    recipient: str | None

    def labels(self) -> dict[str, Any]:
        return {
            "carrier": self.carrier,
            "tracking_number": self.tracking,
            "order_number": self.order,
            "recipient": self.recipient,
        }


def tracking_number(rng: random.Random, carrier: str) -> str:
    """A made-up number in the carrier's format (see `contracts.notice.TRACKING_NUMBER`)."""
    if carrier == "UPS":
        return "1Z" + "".join(rng.choice(ALPHANUMERIC) for _ in range(16))
    if carrier == "DHL Parcel":
        return "JJD" + "".join(rng.choice("0123456789") for _ in range(18))
    if carrier == "FedEx":
        return str(rng.randrange(10**11, 10**12))
    country = {"Royal Mail": "GB", "La Poste": "FR", "PostNL": "NL", "Deutsche Post": "DE"}
    prefix = rng.choice(["RR", "LX", "CP", "RB"])
    return f"{prefix}{rng.randrange(10**8, 10**9)}{country[carrier]}"


def _notice(rng: random.Random) -> tuple[Notice, str, str]:
    """The values of one notice, the shop, a day. Each value is left out of about a third of
    the notices: the order number and the recipient a little less often here, because two
    layouts never state one of them."""
    carrier = rng.choice(CARRIERS)
    shop, prefix = rng.choice(SHOPS)
    notice = Notice(
        carrier=carrier if rng.random() >= 0.3 else None,
        tracking=tracking_number(rng, carrier) if rng.random() >= 0.33 else None,
        order=f"{prefix}-{rng.randrange(10**4, 10**7):0{rng.choice([5, 6, 7])}d}"
        if rng.random() >= 0.2
        else None,
        recipient=rng.choice(RECIPIENTS) if rng.random() >= 0.2 else None,
    )
    when = day(date(2026, 3, 2) + timedelta(days=rng.randrange(0, 60)), rng.choice(["long", "us"]))
    return notice, shop, when


def carrier_email(rng: random.Random) -> tuple[str, Notice]:
    notice, shop, when = _notice(rng)
    who = notice.carrier or "our delivery partner"
    out = [f"Subject: Your parcel from {shop} is on its way", ""]
    out.append(f"Hello {notice.recipient}," if notice.recipient else "Hello,")
    out += ["", f"your parcel from {shop} is on its way with {who}."]
    if notice.tracking:
        out.append(f"Tracking number: {notice.tracking}")
    else:
        out.append("Tracking details will follow in a separate e-mail.")
    if notice.order:
        out.append(f"Order: {notice.order}")
    out.append(f"Expected delivery: {when}")
    out.append(f"Weight: {rng.randint(2, 95) / 10} kg, 1 of {rng.randint(1, 3)} parcels")
    out += ["", f"Questions? Call +44 20 7946 0{rng.randint(100, 999)}.", rng.choice(SIGNATURES)]
    return "\n".join(out), notice


def shop_dispatch(rng: random.Random) -> tuple[str, Notice]:
    notice, shop, when = _notice(rng)
    out = [shop.upper(), ""]
    out.append(f"Order {notice.order} has shipped" if notice.order else "Your order has shipped")
    out.append("")
    out.append(f"Dear {notice.recipient}," if notice.recipient else "Dear customer,")
    items = rng.randint(1, 4)
    out.append(f"good news: the {items} item(s) you ordered on {when} left our warehouse in "
               f"{rng.choice(CITIES)} today.")  # fmt: skip
    if notice.carrier and notice.tracking:
        out.append(f"{notice.carrier} will deliver them; follow the parcel with tracking "
                   f"number {notice.tracking}.")  # fmt: skip
    elif notice.carrier:
        out.append(f"{notice.carrier} will deliver them in the next few days.")
    elif notice.tracking:
        out.append(f"You can follow the parcel with tracking number {notice.tracking}.")
    out.append(f"Customer number: {rng.randrange(10**7, 10**8)}")
    out += ["", "Thank you for shopping with us!", rng.choice(SIGNATURES)]
    return "\n".join(out), notice


def missed_delivery(rng: random.Random) -> tuple[str, Notice]:
    notice, _, when = _notice(rng)
    notice.order = None  # a carrier's card never knows the shop's order number
    out = [notice.carrier or "Parcel delivery service", "Sorry we missed you", ""]
    whom = f" for {notice.recipient}" if notice.recipient else ""
    out.append(f"We tried to deliver a parcel{whom} at {rng.randint(8, 18)}:"
               f"{rng.choice(['05', '20', '42'])} on {when}.")  # fmt: skip
    if notice.tracking:
        out.append(f"Item: {notice.tracking}")
    depot = rng.choice(["Station Road depot", "Kanalstraße 12", "Rue des Lilas 4"])
    out.append(f"Collect it from {depot} after 12:00 tomorrow. Bring this card and photo ID.")
    out.append(f"Card no. {rng.randint(10, 99)}-{rng.randint(100, 999)}-{rng.randint(1000, 9999)}")
    return "\n".join(out), notice


def text_message(rng: random.Random) -> tuple[str, Notice]:
    notice, shop, _ = _notice(rng)
    notice.recipient = None  # a text message is addressed to a phone, not a name
    who = f"{notice.carrier}: your" if notice.carrier else "Your"
    parcel = f"parcel {notice.tracking}" if notice.tracking else "parcel"
    order = f" (order {notice.order})" if notice.order else ""
    window = rng.choice(["10:00-12:00", "13:15-14:15", "before 18:00"])
    text = (f"{who} {parcel} from {shop}{order} arrives today {window}. "
            "Reply STOP to opt out.")  # fmt: skip
    return text, notice


def customs_notice(rng: random.Random) -> tuple[str, Notice]:
    notice, shop, when = _notice(rng)
    who = notice.carrier or "We"
    out = ["Import charges due", ""]
    addressed = f"addressed to {notice.recipient}" if notice.recipient else "addressed to you"
    holds = "is holding" if notice.carrier else "are holding"
    out.append(f"{who} {holds} a parcel {addressed} from {shop}.")
    out.append(f"Amount due: EUR {rng.randint(800, 4500) / 100:.2f} (VAT and handling fee)")
    if notice.tracking:
        out.append(f"Reference: {notice.tracking}")
    if notice.order:
        out.append(f"Sender's reference: {notice.order}")
    out.append(f"Pay online by {when}; unpaid parcels are returned to the sender.")
    return "\n".join(out), notice


def delivered(rng: random.Random) -> tuple[str, Notice]:
    notice, shop, when = _notice(rng)
    out = [f"Delivered: your order {notice.order}" if notice.order else "Delivered!", ""]
    out.append(f"Hi {notice.recipient}," if notice.recipient else "Hi there,")
    neighbour = rng.choice(["at no. 12", "at the front desk", "in your safe place"])
    out.append(f"your parcel from {shop} was delivered on {when} at {rng.randint(8, 19)}:"
               f"{rng.choice(['03', '32', '57'])} and left {neighbour}.")  # fmt: skip
    if notice.tracking and notice.carrier:
        out.append(f"Tracking: {notice.tracking} ({notice.carrier})")
    elif notice.tracking:
        out.append(f"Tracking: {notice.tracking}")
    elif notice.carrier:
        out.append(f"Delivered by {notice.carrier}.")
    out += ["", rng.choice(SIGNATURES)]
    return "\n".join(out), notice


NOTICE_LAYOUTS: list[Callable[[random.Random], tuple[str, Notice]]] = [
    carrier_email, shop_dispatch, missed_delivery, text_message, customs_notice, delivered,
]  # fmt: skip


def notices(rng: random.Random, count: int, start: int = 1) -> list[dict[str, Any]]:
    rows = []
    for index in range(count):
        document, notice = NOTICE_LAYOUTS[index % len(NOTICE_LAYOUTS)](rng)
        rows.append({
            "id": f"ntc-{start + index:03d}",
            "document": document,
            "prompt": NOTICE_PROMPT,
            "expected": notice.labels(),
        })  # fmt: skip
    return rows


def write(path: Path, rows: list[dict[str, Any]]) -> None:
    path.write_text(
        "".join(json.dumps(row, ensure_ascii=False) + "\n" for row in rows), encoding="utf-8"
    )


def main(out: Path = HERE) -> None:
    """Write every dataset into `out` (this folder by default)."""
    rng = random.Random(SEED)
    write(out / "invoices.jsonl", invoices(rng))
    write(out / "decisions.jsonl", decisions(rng))
    notice_rng = random.Random(NOTICE_SEED)
    write(out / "notices.jsonl", notices(notice_rng, 60))
    write(out / "notices-calibration.jsonl", notices(notice_rng, 40, start=61))


if __name__ == "__main__":
    main(Path(sys.argv[1]) if len(sys.argv) > 1 else HERE)
