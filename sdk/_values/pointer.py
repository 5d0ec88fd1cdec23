"""JSON pointers (RFC 6901) and local `$ref` resolution: the one copy every module uses.

A leaf: it imports nothing from the SDK, so the schema code, the parser, the streaming reader and
the diagnostics can all build on it without import circles. One rule for array indices
everywhere: a token names an array element only when it is `0` or a digit string without a
leading zero (`01`, `-1` and `+1` name nothing), as RFC 6901 says.
"""

from __future__ import annotations

import re
import urllib.parse
from collections.abc import Iterable
from collections.abc import Mapping
from typing import Any

__all__ = [
    "escape_pointer",
    "lookup",
    "pointer_of",
    "replace_at",
    "resolve_ref",
    "split_pointer",
    "unescape_token",
]

_ARRAY_INDEX = re.compile(r"0|[1-9][0-9]*")


def escape_pointer(token: str | int) -> str:
    """One JSON-pointer reference token (RFC 6901): `~` -> `~0`, `/` -> `~1`."""
    return str(token).replace("~", "~0").replace("/", "~1")


def unescape_token(token: str) -> str:
    """The name a reference token stands for (`~1` -> `/`, then `~0` -> `~`)."""
    return token.replace("~1", "/").replace("~0", "~")


def pointer_of(path: Iterable[str | int]) -> str:
    """A JSON pointer from path parts (`["items", 3, "qty"]` -> `/items/3/qty`)."""
    return "".join(f"/{escape_pointer(part)}" for part in path)


def split_pointer(pointer: str) -> list[str]:
    """The unescaped tokens of a pointer (`""` is the whole document: no tokens)."""
    if pointer == "":
        return []
    if not pointer.startswith("/"):
        raise ValueError(f"a JSON pointer starts with '/' (or is empty), not {pointer!r}")
    return [unescape_token(token) for token in pointer[1:].split("/")]


def lookup(document: Any, pointer: str | list[str]) -> tuple[bool, Any]:
    """`(True, value)` at `pointer` in `document`, or `(False, None)` where it names nothing."""
    tokens = split_pointer(pointer) if isinstance(pointer, str) else pointer
    node = document
    for token in tokens:
        if isinstance(node, Mapping):
            if token not in node:
                return False, None
            node = node[token]
        elif isinstance(node, list):
            if _ARRAY_INDEX.fullmatch(token) is None or int(token) >= len(node):
                return False, None
            node = node[int(token)]
        else:
            return False, None
    return True, node


def replace_at(document: Any, pointer: str, value: Any) -> Any:
    """Put `value` in place of what `pointer` names in `document` (in place: an object's member
    or a list's item), and return what it replaced. A `LookupError` where the pointer names
    nothing, as `lookup` reads it (`/items/01` names nothing), and for `""`: the whole
    document is in no container, so it cannot be replaced in place."""
    tokens = split_pointer(pointer)
    if not tokens:
        raise LookupError("the pointer '' is the whole document: nothing holds it to replace")
    *path, last = tokens
    found, container = lookup(document, path)
    named, held = lookup(container, [last]) if found else (False, None)
    if not named:
        raise LookupError(f"the pointer {pointer!r} names nothing in the document")
    container[int(last) if isinstance(container, list) else last] = value
    return held


def resolve_ref(root: Mapping[str, Any], ref: str) -> tuple[str, dict[str, Any]]:
    """A local reference (`#`, `#/$defs/Name`, any `#/...` pointer, percent-encoded or not):
    the pointer of its target in `root` and the target schema node.

    Raises `ValueError` for a reference to another document or to nothing.
    """
    if not ref.startswith("#"):
        raise ValueError(f"only local references are supported, not {ref!r}")
    pointer = urllib.parse.unquote(ref[1:])
    try:
        found, target = lookup(root, pointer)
    except ValueError:
        found, target = False, None
    if not found or not isinstance(target, dict):
        raise ValueError(f"unresolvable reference {ref!r}")
    return pointer, target
