"""Text that holds nothing a reader sees (`blank`): what a quote, a prompt or a template made of
it says is nothing, whatever its length."""

from __future__ import annotations

import unicodedata
from typing import Final

__all__ = ["blank"]

# Characters a reader does not see as text of their own: white space (`str.isspace`), controls,
# invisible format characters (zero-width space and joiners, the byte order mark, word joiner,
# tags...), combining marks without a base, and the blank letters and symbols Unicode draws as
# nothing (Hangul fillers, the blank Braille pattern).
_INVISIBLE_CATEGORIES: Final = frozenset({"Cc", "Cf", "Mn", "Me", "Mc", "Zs", "Zl", "Zp"})
_BLANK_GLYPHS: Final = frozenset("\u115f\u1160\u3164\uffa0\u2800")


def blank(text: str) -> bool:
    """Whether `text` holds nothing a reader sees: only white space, invisible characters and
    combining marks (`""` among them). Stops at the first character that shows."""
    return all(
        char.isspace()
        or char in _BLANK_GLYPHS
        or unicodedata.category(char) in _INVISIBLE_CATEGORIES
        for char in text
    )
