"""Text that holds nothing a reader sees (`blank`): what a quote, a prompt or a template made of
it says is nothing, whatever its length."""

from __future__ import annotations

import unicodedata
from typing import Final

__all__ = ["blank"]

# Characters a reader does not see as text of their own: white space (`str.isspace`), controls,
# invisible format characters (zero-width space and joiners, the byte order mark, word joiner,
# tags...), combining marks that take no space of their own (`Mn`, `Me`: a spacing mark, `Mc`,
# is drawn beside its base, or alone), and the blank letters and symbols Unicode draws as
# nothing (Hangul fillers, the blank Braille pattern).
_INVISIBLE_CATEGORIES: Final = frozenset({"Cc", "Cf", "Mn", "Me", "Zs", "Zl", "Zp"})
_BLANK_GLYPHS: Final = frozenset("\u115f\u1160\u3164\uffa0\u2800")
# The format characters that are drawn (Unicode's Prepended_Concatenation_Mark: the Arabic
# number and year signs, the end of ayah, the Syriac abbreviation mark, the Kaithi number
# signs), which a font shows as a sign above or around the digits after them.
_DRAWN_FORMATS: Final = frozenset(
    "\u0600\u0601\u0602\u0603\u0604\u0605\u06dd\u070f\u0890\u0891\u08e2\U000110bd\U000110cd"
)


def blank(text: str) -> bool:
    """Whether `text` holds nothing a reader sees: only white space, invisible characters and
    combining marks that take no space (`""` among them). Stops at the first character that
    shows."""
    return all(
        char.isspace()
        or char in _BLANK_GLYPHS
        or (unicodedata.category(char) in _INVISIBLE_CATEGORIES and char not in _DRAWN_FORMATS)
        for char in text
    )
