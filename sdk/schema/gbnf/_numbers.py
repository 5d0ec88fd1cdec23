"""Integers and numbers within bounds, written as exact digit patterns."""

from __future__ import annotations

import math
from typing import Any

from sdk.schema.gbnf._digits import uint_range
from sdk.schema.gbnf._walker import SchemaWalker

Bound = tuple[int, bool]  # (value, inclusive)
Bounds = tuple[Bound | None, Bound | None]  # (lower, upper)
_BOUND_KEYWORDS = ("minimum", "exclusiveMinimum", "maximum", "exclusiveMaximum")


class NumberRules(SchemaWalker):
    """Rules for integer and number nodes."""

    def bounds(
        self, node: dict[str, Any], pointer: str, *, integer: bool
    ) -> Bounds | None:
        """(lower, upper), each (value, inclusive) or None; None after a recorded problem.

        Integer bounds are rounded inward (exact); number bounds must be integers.
        """
        lower: Bound | None = None
        upper: Bound | None = None
        ok = True
        given = {key: node[key] for key in _BOUND_KEYWORDS if key in node}
        for side in ("Minimum", "Maximum"):
            flag = given.get(f"exclusive{side}")
            if isinstance(flag, bool):
                # Draft 4: a boolean `exclusiveMinimum` makes `minimum` exclusive.
                del given[f"exclusive{side}"]
                if flag and side.lower() in given:
                    given[f"exclusive{side}"] = given.pop(side.lower())
        for keyword, value in given.items():
            if isinstance(value, bool) or not isinstance(value, int | float):
                self.problem(pointer, keyword, f"`{keyword}` must be a number")
                ok = False
                continue
            if isinstance(value, float) and not math.isfinite(value):
                self.problem(pointer, keyword, f"`{keyword}` must be finite")
                ok = False
                continue
            exclusive = keyword.startswith("exclusive")
            is_lower = keyword.endswith("inimum")
            if integer:
                # For integers every bound is an inclusive integer bound.
                if is_lower:
                    bound = (math.floor(value) + 1 if exclusive else math.ceil(value), True)
                else:
                    bound = (math.ceil(value) - 1 if exclusive else math.floor(value), True)
            elif float(value).is_integer():
                bound = (int(value), not exclusive)
            else:
                self.problem(
                    pointer,
                    keyword,
                    f"a non-integer `{keyword}` ({value!r}) on a number is not expressible",
                )
                ok = False
                continue
            if is_lower:
                lower = bound if lower is None else _tighter(lower, bound, lower=True)
            else:
                upper = bound if upper is None else _tighter(upper, bound, lower=False)
        return (lower, upper) if ok else None

    def bounded(self, node: dict[str, Any], pointer: str, kind: str) -> str | Bounds:
        """The node's bounds, or the rule when there is nothing to bound: the shared `integer`
        or `number` rule, or `"?"` after a problem."""
        found = self.bounds(node, pointer, integer=kind == "integer")
        if found is None:
            return '"?"'
        if found == (None, None):
            return self.shared(kind)
        return found

    def integer(self, node: dict[str, Any], pointer: str, hint: str) -> str:
        found = self.bounded(node, pointer, "integer")
        if isinstance(found, str):
            return found
        lower, upper = found
        lo = None if lower is None else lower[0]
        hi = None if upper is None else upper[0]
        alts: list[str] = []
        if hi is None or hi >= 0:
            alts += uint_range(0 if lo is None else max(lo, 0), hi)
        if lo is None or lo < 0:
            magnitude_lo = 1 if hi is None or hi >= -1 else -hi
            alts += [f'"-" {alt}' for alt in uint_range(magnitude_lo, None if lo is None else -lo)]
        if not alts:
            return self.problem(
                pointer, "minimum" if lower else "maximum", "no integer satisfies the bounds"
            )
        return self.alternatives(alts, hint)

    def number(self, node: dict[str, Any], pointer: str, hint: str) -> str:
        found = self.bounded(node, pointer, "number")
        if isinstance(found, str):
            return found
        lower, upper = found
        alts = self.decimals(lower, upper)
        # Negative values: "-" and a magnitude m > 0 with the bounds mirrored.
        if lower is None or lower[0] < 0:
            m_lower: Bound = (0, False)
            if upper is not None and -upper[0] > 0:
                m_lower = (-upper[0], upper[1])
            m_upper = None if lower is None else (-lower[0], lower[1])
            alts += [f'"-" {alt}' for alt in self.decimals(m_lower, m_upper)]
        if not alts:
            return self.problem(
                pointer, "minimum" if lower else "maximum", "no number satisfies the bounds"
            )
        return self.alternatives(alts, hint)

    def decimals(self, lower: Bound | None, upper: Bound | None) -> list[str]:
        """Unsigned decimals (no exponent) within integer bounds; lower defaults to >= 0.

        A written value I.F lies in [I, I+1): every fraction is allowed for I from the lower
        bound to upper-1; at an exclusive lower bound I == lo needs a non-zero fraction; at an
        inclusive upper bound I == hi needs a zero (or no) fraction.
        """
        lo, lo_inclusive = lower if lower is not None else (0, True)
        first = max(lo if lo_inclusive else lo + 1, 0)
        last = None if upper is None else upper[0] - 1
        alts: list[str] = []
        if last is None or first <= last:
            frac = self.shared("frac")
            alts += [f"{alt} {frac}" for alt in uint_range(first, last)]
        if not lo_inclusive and lo >= 0 and (upper is None or lo + 1 <= upper[0]):
            frac = self.shared("frac-nonzero")
            alts += [f"{alt} {frac}" for alt in uint_range(lo, lo)]
        if upper is not None and upper[1] and upper[0] >= 0:
            hi = upper[0]
            if hi > lo or (hi == lo and lo_inclusive):
                frac = self.shared("frac-zero")
                alts += [f"{alt} {frac}" for alt in uint_range(hi, hi)]
        return alts


def _tighter(a: Bound, b: Bound, *, lower: bool) -> Bound:
    if a[0] != b[0]:
        return max(a, b) if lower else min(a, b)
    return (a[0], a[1] and b[1])  # same value: exclusive wins
