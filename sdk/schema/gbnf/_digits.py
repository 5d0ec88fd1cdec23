"""Canonical decimal integers in a range, as GBNF alternatives (exact digit patterns)."""

from __future__ import annotations

from sdk.schema.gbnf._gbnf_text import join_terms
from sdk.schema.gbnf._keywords import MAX_INTEGER_DIGITS


def _digit_range(lo: int, hi: int) -> str:
    if lo == hi:
        return f'"{lo}"'
    return "[0-9]" if (lo, hi) == (0, 9) else f"[{lo}-{hi}]"


def _any_digits(count: int) -> list[str]:
    if count == 0:
        return []
    return ["[0-9]" if count == 1 else f"[0-9]{{{count}}}"]


def _same_length(lo: str, hi: str) -> list[list[str]]:
    """Sequences matching the digit strings from `lo` to `hi` (same length, lo <= hi)."""
    if not lo:
        return [[]]
    if lo[0] == hi[0]:
        return [[f'"{lo[0]}"', *rest] for rest in _same_length(lo[1:], hi[1:])]
    width = len(lo) - 1
    low_full = set(lo[1:]) <= {"0"}
    high_full = set(hi[1:]) <= {"9"}
    first = int(lo[0]) if low_full else int(lo[0]) + 1
    last = int(hi[0]) if high_full else int(hi[0]) - 1
    out: list[list[str]] = []
    if not low_full:
        out += [[f'"{lo[0]}"', *rest] for rest in _same_length(lo[1:], "9" * width)]
    if first <= last:
        out.append([_digit_range(first, last), *_any_digits(width)])
    if not high_full:
        out += [[f'"{hi[0]}"', *rest] for rest in _same_length("0" * width, hi[1:])]
    return out


def _merge_literals(atoms: list[str]) -> str:
    """Join atoms, fusing adjacent one-digit literals: `"1" "2" [0-9]` -> `"12" [0-9]`."""
    out: list[str] = []
    for atom in atoms:
        if out and atom.startswith('"') and out[-1].startswith('"'):
            out[-1] = out[-1][:-1] + atom[1:]
        else:
            out.append(atom)
    return " ".join(out)


def uint_range(lo: int, hi: int | None) -> list[str]:
    """Alternatives matching canonical decimal integers (no leading zero) in [lo, hi].

    `hi` None means "up to the digit cap". Empty when the range is empty or beyond the cap.
    """
    cap = 10**MAX_INTEGER_DIGITS - 1
    hi = cap if hi is None else min(hi, cap)
    lo = max(lo, 0)
    if lo > hi:
        return []
    alts: list[str] = []
    if lo == 0:
        alts.append('"0"')
        lo = 1
        if lo > hi:
            return alts
    full_from: int | None = None  # first digit count of a run of fully covered lengths
    for width in range(len(str(lo)), len(str(hi)) + 1):
        start, end = max(lo, 10 ** (width - 1)), min(hi, 10**width - 1)
        if start == 10 ** (width - 1) and end == 10**width - 1:
            full_from = width if full_from is None else full_from
            continue
        if full_from is not None:
            alts.append(_full_widths(full_from, width - 1))
            full_from = None
        alts += [_merge_literals(seq) for seq in _same_length(str(start), str(end))]
    if full_from is not None:
        alts.append(_full_widths(full_from, len(str(hi))))
    return alts


def _full_widths(low: int, high: int) -> str:
    """Every integer with `low` to `high` digits."""
    if low == high:
        return join_terms("[1-9]", *_any_digits(low - 1))
    return f"[1-9] [0-9]{{{low - 1},{high - 1}}}"
