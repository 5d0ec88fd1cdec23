"""How the bench writes its figures: one format per kind of quantity, shared by every row."""

from __future__ import annotations

__all__ = ["duration", "factor", "micros", "millis", "ratio", "verdict"]


def ratio(ours: float, base: float) -> str:
    """`ours / base` as a figure: two decimals under 10x, whole numbers above."""
    return factor(ours / base)


def factor(value: float) -> str:
    """A ratio already divided, written as `ratio` writes one."""
    return f"{value:.2f}x" if value < 10 else f"{value:,.0f}x"


def micros(seconds: float) -> str:
    value = seconds * 1e6
    return f"{value:,.1f} us" if value < 100 else f"{value:,.0f} us"


def millis(seconds: float) -> str:
    return f"{seconds * 1e3:,.1f} ms"


def duration(seconds: float) -> str:
    return micros(seconds) if seconds < 1e-3 else millis(seconds)


def verdict(value: float, goal: float) -> str:
    """`yes` when `value` is within an upper-bound goal, else `NO`."""
    return "yes" if value <= goal else "NO"
