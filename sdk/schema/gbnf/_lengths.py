"""A pattern narrowed to `minLength`/`maxLength`: the bounds become repetition counts.

A grammar cannot intersect a regular expression with a length bound in general, but it can
write a *narrower* expression whose every match has an allowed length: repetitions are capped
(a share of the spare length each) and raised (the missing length taken where there is room).
What comes out matches only strings the pattern matches and the bounds allow; it may leave
some of them out (a narrowing). An end the pattern leaves open (no `^` or `$`) becomes "any
characters" first, so that it can be bounded too.
"""

from __future__ import annotations

import math

from sdk.schema import _regex as rx

_ANY = rx.CharSet(rx.complement(()))


def fit(branch: rx.Branch, min_len: int, max_len: int | None) -> rx.Node | None:
    """An anchored node matching only strings `branch` matches with a length in bounds."""
    items: list[rx.Node] = []
    if not branch.anchored_start:
        items.append(rx.Repeat(_ANY, 0, None))
    items.append(branch.node)
    if not branch.anchored_end:
        items.append(rx.Repeat(_ANY, 0, None))
    node: rx.Node | None = items[0] if len(items) == 1 else rx.Seq(tuple(items))
    if node is not None and max_len is not None:
        node = _cap(node, max_len)
    if node is not None and min_len:
        node = _lift(node, min_len)
    if node is None:
        return None
    low, high = rx.length_range(node)
    if low < min_len or (max_len is not None and (high is None or high > max_len)):
        return None
    return node


def _cap(node: rx.Node, budget: int) -> rx.Node | None:
    """`node` with every match at most `budget` characters long (None: none left)."""
    low, high = rx.length_range(node)
    if high is not None and high <= budget:
        return node
    if low > budget:
        return None
    if isinstance(node, rx.Seq):
        lows = [rx.length_range(item)[0] for item in node.items]
        flexible = [i for i, item in enumerate(node.items) if rx.length_range(item)[1] != lows[i]]
        spare = budget - sum(lows)
        share, extra = divmod(spare, max(len(flexible), 1))
        items = []
        for index, item in enumerate(node.items):
            if index in flexible:
                allowance = share + (1 if flexible.index(index) < extra else 0)
                capped = _cap(item, lows[index] + allowance)
                if capped is None:
                    return None
                item = capped
            items.append(item)
        return rx.Seq(tuple(items))
    if isinstance(node, rx.Alt):
        options = [capped for o in node.options if (capped := _cap(o, budget)) is not None]
        return rx.Alt(tuple(options)) if options else None
    if isinstance(node, rx.Repeat):
        # Each repetition gets about the square root of the budget (words of up to 15
        # characters, up to 13 of them, in 200), and never less than the minimum count needs.
        per_item = budget // max(node.lo, 1)
        if node.hi is None or node.hi > 1:
            per_item = min(per_item, max(math.isqrt(budget) + 1, rx.length_range(node.node)[0]))
        inner = _cap(node.node, per_item)
        if inner is None:
            return None
        inner_high = rx.length_range(inner)[1] or 1
        most = budget // inner_high
        hi = most if node.hi is None else min(node.hi, most)
        return None if hi < node.lo else rx.Repeat(inner, node.lo, hi)
    return None  # a single character longer than the budget (budget 0)


def _lift(node: rx.Node, need: int) -> rx.Node | None:
    """`node` with every match at least `need` characters long, its longest matches kept."""
    low, high = rx.length_range(node)
    if low >= need:
        return node
    if high is not None and high < need:
        return None
    if isinstance(node, rx.Seq):
        missing = need - low
        items = []
        for item in node.items:
            item_low, item_high = rx.length_range(item)
            room = missing if item_high is None else min(missing, item_high - item_low)
            if room > 0:
                lifted = _lift(item, item_low + room)
                if lifted is None:
                    return None
                item, missing = lifted, missing - room
            items.append(item)
        return rx.Seq(tuple(items)) if missing == 0 else None
    if isinstance(node, rx.Alt):
        options = [lifted for o in node.options if (lifted := _lift(o, need)) is not None]
        return rx.Alt(tuple(options)) if options else None
    if isinstance(node, rx.Repeat):
        inner = node.node
        if rx.length_range(inner)[0] == 0:
            lifted_inner = _lift(inner, 1)
            if lifted_inner is None:
                return None
            inner = lifted_inner
        inner_low = rx.length_range(inner)[0]
        times = math.ceil(need / inner_low)
        if node.hi is None or times <= node.hi:
            return rx.Repeat(inner, max(node.lo, times), node.hi)
        lifted_inner = _lift(inner, math.ceil(need / node.hi))
        return None if lifted_inner is None else rx.Repeat(lifted_inner, node.lo, node.hi)
    return None
