"""What a client keeps of its last call, and how much (`sdk.engine.options.LastCall`: its
options and first messages; `sdk.cache.LastKey`: its request's key): values that cannot change
in place, so the same again (or equal again) means the same content, held at most to these
bounds so that a client does not keep a large call's documents alive."""

from __future__ import annotations

from dataclasses import fields
from typing import Final

from sdk._values.content import PDF
from sdk._values.content import Image
from sdk._values.content import Text

__all__ = ["KEPT_DATA", "KEPT_TEXT", "Kept", "unchanging_part"]

KEPT_TEXT: Final = 1 << 16
"""The most characters of text a client keeps of its last call (its prompt, source and system
prompt, and again in its first messages, which copy them): a call with more is resolved and
keyed again at each call rather than kept alive by the client."""

KEPT_DATA: Final = 64 * 2**20
"""The most bytes of images and PDFs a client keeps of its last call (the objects given, not
copied), as many as the cache key's memo of documents holds (`sdk.cache._key`)."""

_FIELDS_OF: dict[type, tuple[str, ...]] = {
    part: tuple(f.name for f in fields(part)) for part in (Text, Image, PDF)
}
"""Each part's fields, from its declaration (a field added later is checked too)."""
_UNCHANGING = frozenset({str, bytes, type(None)})


def unchanging_part(part: object) -> bool:
    """Whether `part` is a `Text`, `Image` or `PDF` itself, every field a `str`, `bytes` or
    `None` itself: frozen all the way down, so the same part is the same content, and an equal
    one equal by these types' own rules (a subclass, of a part or of its fields, may add state
    or compare by a rule of its own)."""
    names = _FIELDS_OF.get(type(part))
    return names is not None and all(type(getattr(part, name)) in _UNCHANGING for name in names)


class Kept:
    """A running count of what a call would have kept (`add`), within the bounds: `fits` once
    every value is counted."""

    __slots__ = ("data", "text")

    def __init__(self) -> None:
        self.text = 0
        self.data = 0

    def add(self, value: object) -> bool:
        """Count `value` (a `str` itself, `None`, or a list or tuple of `str` and unchanging
        parts: a prompt, a message's content); `False` where it is none of these (nothing is
        kept then)."""
        if value is None:
            return True
        if type(value) is str:
            self.text += len(value)
            return True
        if type(value) is not list and type(value) is not tuple:
            return False
        for part in value:
            if type(part) is str:
                self.text += len(part)
            elif not self.add_part(part):
                return False
        return True

    def add_part(self, part: object) -> bool:
        """Count one part (`unchanging_part`); `False` where it is not one."""
        if not unchanging_part(part):
            return False
        if isinstance(part, Text):
            self.text += len(part.text)
        elif isinstance(part, (Image, PDF)) and part.data is not None:
            self.data += len(part.data)
        return True

    @property
    def fits(self) -> bool:
        """Whether what was counted is within `KEPT_TEXT` and `KEPT_DATA`."""
        return self.text <= KEPT_TEXT and self.data <= KEPT_DATA
