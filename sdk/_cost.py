"""What a call cost, from the maintained `genai-prices` table (the optional `cost` extra).

`attempts_cost(attempts)` prices each attempt's usage at the model and provider that answered it
and sums them; `None` when the package is not installed or any attempt that spent tokens went to
a model the table does not know (a partial sum would read as the whole cost).
"""

from __future__ import annotations

import logging
import warnings
from collections.abc import Sequence
from decimal import Decimal
from functools import cache
from typing import Any

from sdk._values.profile import Pricing
from sdk._values.profile import profile
from sdk._values.records import Usage
from sdk.errors import Attempt

__all__ = ["attempts_cost", "usage_cost"]

logger = logging.getLogger("sdk.client")


@cache
def _prices() -> Any:
    try:
        import genai_prices
    except ImportError:
        return None
    return genai_prices


def usage_cost(usage: Usage, *, provider: str | None, model: str | None) -> Decimal | None:
    """The price of `usage` at `model` from `provider` (its profile's `pricing`), or `None` if it
    cannot be priced."""
    prices = _prices()
    pricing = _pricing(provider)
    if prices is None or pricing is None or not model:
        return None
    input_tokens = usage.input_tokens
    if pricing.input_excludes_cache:
        input_tokens += usage.cache_read_tokens + usage.cache_write_tokens
    output_tokens = usage.output_tokens
    if pricing.output_excludes_reasoning:
        output_tokens += usage.reasoning_tokens
    priced = prices.Usage(
        input_tokens=input_tokens,
        output_tokens=output_tokens,
        cache_read_tokens=usage.cache_read_tokens,
        cache_write_tokens=usage.cache_write_tokens,
    )
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # the table's own notes on estimated prices
            total = prices.calc_price(priced, model, provider_id=pricing.provider_id).total_price
    except Exception as exc:  # an unknown model (LookupError) or a table the package rejects
        logger.debug("no price for %s %s: %s", provider, model, exc)
        return None
    return Decimal(total)


def _pricing(provider: str | None) -> Pricing | None:
    """The family's pricing; `None` for no provider or a name no profile has (a provider made
    by hand for a test), and for a name looked up while an installed provider package is
    broken: the price is a by-product of an answer already made, which a plugin that fails to
    import must not take away (the failure is logged, and `sdk providers` names it)."""
    if not provider:
        return None
    try:
        return profile(provider).pricing
    except ValueError:
        return None
    except ImportError as error:  # (`profile`: a declared provider module failed to load)
        _warn_unpriced(str(error))
        return None


@cache
def _warn_unpriced(why: str) -> None:
    """Log once per distinct failure: every attempt of every call would say it again."""
    logger.warning("a cost left unknown: %s", why)


def attempts_cost(attempts: Sequence[Attempt]) -> Decimal | None:
    """The summed price of every attempt that spent tokens, or `None` if one cannot be priced."""
    total = Decimal(0)
    for attempt in attempts:
        if attempt.usage.total_tokens == 0:
            continue
        cost = usage_cost(attempt.usage, provider=attempt.provider, model=attempt.model)
        if cost is None:
            return None
        total += cost
    return total
