"""ShipmentNotice: values copied exactly from a shipping or delivery notice, null where it is
silent. The reference contract of the notices eval (`examples/data/eval/notices.jsonl`)."""

from typing import ClassVar

from pydantic import Field

from sdk import Contract
from sdk import Verbatim
from sdk.contract import LintIgnore

TRACKING_NUMBER = r"^(1Z[0-9A-Z]{16}|[A-Z]{2}[0-9]{9}[A-Z]{2}|JJD[0-9]{18}|[0-9]{12})$"
"""The tracking-number formats the notices use: UPS (`1Z` + 16), UPU S10 (`RR123456785GB`, the
postal services), DHL Parcel (`JJD` + 18 digits) and FedEx (12 digits)."""
ORDER_NUMBER = r"^[A-Z]{2,4}-[0-9]{5,8}$"
"""A shop's order number: two to four capitals, a hyphen, five to eight digits."""


class ShipmentNotice(Contract):
    """What a shipping notice states, each value copied exactly; null where it does not say."""

    lint_ignore: ClassVar[LintIgnore] = {
        pointer: {
            "dialect-strips": "the pattern is what grounds an id on a local engine (where no "
            "span of the notice has its form, null is all that is left); a hosted provider is "
            "held to it by the parser, at the cost of a rare retry"
        }
        for pointer in ("/properties/tracking_number", "/properties/order_number")
    } | {
        f"/properties/{name}/anyOf/0": {
            "unbounded-output": "copied from the notice: the source check holds it to a span of "
            "the notice, and targets that ground copied values bound it by the source while "
            "decoding"
        }
        for name in ("carrier", "recipient")
    }

    carrier: Verbatim | None = Field(
        description="The delivery company's name as the notice writes it (such as DHL Express "
        "or Royal Mail), or null if the notice does not name one."
    )
    tracking_number: Verbatim | None = Field(
        pattern=TRACKING_NUMBER,
        description="The parcel's tracking number, copied exactly, or null if none is given.",
    )
    order_number: Verbatim | None = Field(
        pattern=ORDER_NUMBER,
        description="The shop's order number, copied exactly, or null if none is given.",
    )
    recipient: Verbatim | None = Field(
        description="The full name of the person the parcel is for, as written, or null if "
        "the notice does not name them."
    )
