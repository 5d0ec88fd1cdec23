"""Text from outside (an input's ids, a provider's error message) made safe to print on a
terminal: every control character shown as an escape, never sent as itself.

A terminal acts on control characters: ESC starts a sequence that can clear the screen, recolour
or retitle it (and, in some terminals, more), a carriage return or a newline lets a value
overwrite or forge the lines around it, and the bidirectional overrides reorder what is shown.
`visible` spells each of them as Python does (`\\x1b`, `\\n`, `\\u202e`), so the text reads as
it is stored.
"""

from __future__ import annotations

__all__ = ["visible"]

_NAMED = {"\t": "\\t", "\n": "\\n", "\r": "\\r"}

_BIDI = frozenset(
    [chr(c) for c in range(0x202A, 0x202F)]  # embeddings and overrides
    + [chr(c) for c in range(0x2066, 0x206A)]  # isolates
    + ["\u200e", "\u200f", "\u061c", "\u2028", "\u2029"]  # marks, line and paragraph separators
)


def _unsafe(char: str) -> bool:
    code = ord(char)
    return code < 0x20 or 0x7F <= code <= 0x9F or char in _BIDI


_TABLE = {
    ord(c): _NAMED.get(c) or (f"\\x{ord(c):02x}" if ord(c) <= 0xFF else f"\\u{ord(c):04x}")
    for c in [chr(n) for n in range(0xA0)] + sorted(_BIDI)
    if _unsafe(c)
}


_KEEP_LINES = {code: escape for code, escape in _TABLE.items() if chr(code) not in "\n\t"}


def visible(text: str, *, lines: bool = False) -> str:
    """`text` with every C0 and C1 control character (ESC, carriage return, bell, DEL, ...) and
    every bidirectional override written as its escape (`\\x1b`); `lines=True` keeps newlines
    and tabs (text that is several lines on purpose, such as a message or a table)."""
    return text.translate(_KEEP_LINES if lines else _TABLE)


_IN_JSON = {
    code: f"\\u{code:04x}" for code in _TABLE if code >= 0x7F
}  # (`json.dumps` escapes C0 itself; DEL, C1 and the overrides it writes as they are)


def visible_json(dumped: str) -> str:
    """JSON text (`json.dumps(..., ensure_ascii=False)`) with DEL, the C1 controls and the
    bidirectional overrides written as `\\u` escapes too: the same data, safe on a terminal
    (outside strings JSON holds none of them, so only strings change)."""
    return dumped.translate(_IN_JSON)
