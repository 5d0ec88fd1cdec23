"""The statistics of a paired evaluation: pure functions on per-item outcomes.

- `wilson_interval`: a 95% interval for one arm's rate (accuracy, abstention), closed form, sound
  at 0% and 100% and for small samples, where the normal approximation is not;
- `paired_bootstrap`: the difference in accuracy between two arms on the same items, with a
  percentile bootstrap interval that resamples items (so the pairing is kept);
- `mcnemar_exact`: the exact McNemar test on the discordant pairs (items one arm got right and
  the other wrong): under "no difference" each discordant item goes either way with probability
  1/2, so the two-sided p-value is a binomial tail, computed exactly with `math.comb`.

A difference whose interval contains 0 and whose p-value is large is noise at this sample size,
and the report says so.
"""

from __future__ import annotations

import math
import random
from collections.abc import Sequence
from dataclasses import dataclass

__all__ = [
    "Interval",
    "McNemar",
    "PairedDifference",
    "binomial_two_sided",
    "mcnemar_exact",
    "paired_bootstrap",
    "percentile",
    "wilson_interval",
]

Z_95 = 1.959963984540054
"""The standard normal quantile for a two-sided 95% interval."""


@dataclass(frozen=True, slots=True)
class Interval:
    """A point estimate and its interval."""

    estimate: float
    """The point estimate."""
    low: float
    """The interval's lower bound."""
    high: float
    """The interval's upper bound."""

    def contains(self, value: float) -> bool:
        return self.low <= value <= self.high


@dataclass(frozen=True, slots=True)
class McNemar:
    """The exact McNemar test: discordant counts and the two-sided p-value."""

    only_a: int
    """Items arm A got right and arm B wrong."""
    only_b: int
    """Items arm B got right and arm A wrong."""
    p_value: float


@dataclass(frozen=True, slots=True)
class PairedDifference:
    """Accuracy of B minus accuracy of A on the same items, its interval and McNemar's test."""

    items: int
    difference: Interval
    mcnemar: McNemar

    @property
    def significant(self) -> bool:
        """At the 5% level by McNemar's test (and so, almost always, an interval without 0)."""
        return self.mcnemar.p_value < 0.05


def wilson_interval(successes: int, total: int, *, z: float = Z_95) -> Interval:
    """Wilson score interval of a proportion; `(0, 0, 1)` when there is nothing to count."""
    if total < 0 or not 0 <= successes <= total:
        raise ValueError(f"need 0 <= successes <= total, not {successes} of {total}")
    if total == 0:
        return Interval(0.0, 0.0, 1.0)
    p = successes / total
    z2 = z * z
    centre = (p + z2 / (2 * total)) / (1 + z2 / total)
    half = z * math.sqrt(p * (1 - p) / total + z2 / (4 * total * total)) / (1 + z2 / total)
    return Interval(p, max(0.0, centre - half), min(1.0, centre + half))


def mcnemar_exact(a: Sequence[bool], b: Sequence[bool]) -> McNemar:
    """Exact two-sided McNemar test of per-item correctness of two arms on the same items."""
    _same_length(a, b)
    only_a = sum(1 for x, y in zip(a, b, strict=True) if x and not y)
    only_b = sum(1 for x, y in zip(a, b, strict=True) if y and not x)
    return McNemar(only_a, only_b, binomial_two_sided(min(only_a, only_b), only_a + only_b))


def binomial_two_sided(k: int, n: int) -> float:
    """P-value of `k` successes or fewer in `n` fair coin flips, doubled (capped at 1): the exact
    McNemar p-value when `k` is the smaller discordant count."""
    if n == 0:
        return 1.0
    tail = sum(math.comb(n, i) for i in range(k + 1))
    # Exact integer arithmetic, one division: no underflow for large n.
    return min(1.0, 2 * tail / (1 << n))


def paired_bootstrap(
    a: Sequence[bool],
    b: Sequence[bool],
    *,
    resamples: int = 10_000,
    level: float = 0.95,
    seed: int = 0,
) -> PairedDifference:
    """Accuracy of `b` minus accuracy of `a`, with a percentile bootstrap interval over items.

    Each resample draws items with replacement and keeps both arms' outcomes for an item
    together; seeded, so a report is reproducible.
    """
    _same_length(a, b)
    if resamples < 1:
        raise ValueError("resamples must be at least 1")
    if not 0 < level < 1:
        raise ValueError(f"level must be within (0, 1), not {level}")
    n = len(a)
    test = mcnemar_exact(a, b)
    if n == 0:
        return PairedDifference(0, Interval(0.0, 0.0, 0.0), test)
    # Per item: +1 only B right, -1 only A right, 0 both or neither.
    deltas = [int(y) - int(x) for x, y in zip(a, b, strict=True)]
    estimate = sum(deltas) / n
    rng = random.Random(seed)
    means = sorted(sum(rng.choices(deltas, k=n)) / n for _ in range(resamples))
    tail = (1 - level) / 2
    interval = Interval(estimate, percentile(means, tail), percentile(means, 1 - tail))
    return PairedDifference(n, interval, test)


def percentile(values: Sequence[float], q: float) -> float:
    """The `q` quantile (0..1) of sorted `values`, linear between ranks (numpy's default)."""
    if not values:
        raise ValueError("no values")
    if not 0 <= q <= 1:
        raise ValueError(f"q must be within [0, 1], not {q}")
    position = q * (len(values) - 1)
    below = math.floor(position)
    above = min(below + 1, len(values) - 1)
    low, high = float(values[below]), float(values[above])
    return low + (high - low) * (position - below)


def _same_length(a: Sequence[bool], b: Sequence[bool]) -> None:
    if len(a) != len(b):
        raise ValueError(f"paired outcomes need the same items: {len(a)} and {len(b)}")
