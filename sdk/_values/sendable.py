"""Text a request can carry (`check_text`): every provider's client encodes its request as
UTF-8, which has no form for a lone surrogate, and a Python `str` may hold one (`"\\ud800"`, a
JSON escape read as text, bytes decoded with `surrogateescape`)."""

from __future__ import annotations

from sdk._values.position import TextPosition

__all__ = ["check_text", "lone_surrogate"]


def check_text(text: str, what: str) -> None:
    """Refuse text that cannot be sent: a lone surrogate has no UTF-8 form, so every provider's
    client would fail while encoding the request (`ValueError` naming where it is)."""
    at = lone_surrogate(text)
    if at is not None:
        where = TextPosition.of(text, at)
        raise ValueError(
            f"{what} is not valid Unicode text: a lone surrogate ({text[at]!r}) at "
            f"{where.by_index('character')}"
        )


def lone_surrogate(text: str) -> int | None:
    """The index of the first lone surrogate in `text`, or `None` when it can be sent."""
    if text.isascii():  # (known without reading it: no surrogate, nothing to encode)
        return None
    try:
        # UTF-16 refuses the same code points as UTF-8 (a surrogate, paired or not, is never a
        # Python character) at the same index, and faster: a call's source of 1 MB of German
        # or Chinese took longer to check than judging the reply (bench row 18).
        text.encode("utf-16-le")
    except UnicodeEncodeError as error:
        return error.start
    return None
