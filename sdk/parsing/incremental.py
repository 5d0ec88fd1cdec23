"""An incremental JSON reader for streaming partial objects, in linear total time.

`PartialReader(contract).feed(chunk)` reads a JSON document as it arrives, chunk by chunk, and
hands out `Partial` snapshots of what has been written so far. Unlike the peers' helpers, it
never re-parses the text from the start: the reader keeps its state between chunks (the open
containers, the open string's decoded pieces, a cut escape, number or literal), so the total
work over a stream is linear in its length, however it is cut.

Chunk boundaries may fall anywhere: inside strings, inside escapes (`\\n`, `\\"`, `\\\\`), inside
`\\uXXXX` and between the two halves of a surrogate pair, inside numbers and `true`/`false`/
`null`, inside whitespace. Snapshots do not depend on where the cuts are: the state after a
prefix of the text is the same however that prefix was fed (the tests hold it to that).

What a snapshot shows (`Partial`):

- `.value`: the JSON value so far, as plain dicts, lists, strings, numbers, booleans and `None`.
  An open string shows the prefix decoded so far. A number shows only once it is closed (a
  delimiter followed it: `12` may still become `1234`), `true`/`false`/`null` only once fully
  written, and an object member only once its value has started.
- `.complete` and `.is_complete(pointer)`: a value is complete only when its JSON is closed.
- `.open_pointer`: the innermost value that has started and not yet closed.

Snapshots are plain JSON, never a contract instance: they run no schema, no contract
validation, no semantic check and no cross-field validator (a half-built object would fail
them or, worse, pass them). Only the final text, through `sdk.parse`, runs all of them.

Malformed input raises `sdk.errors.InvalidJSON` in the `feed` call where the text stopped being
the start of any JSON document, with the position of the offending character and the text.

Cost. `feed` does work in proportion to its chunk: strings are copied with regular expressions
and slices, never character by character in Python, and a container that arrives whole in a
large chunk goes to the C JSON scanner. The reader is a state machine: a step per state
(`_STEPS`), each reading as far as one regular expression takes its state's common case (a
whole member, `, "name": 12`, is one match), so a chunk costs a few steps, not one per token.
A snapshot costs O(1) to take; its `.value` is built on first access by copying only the
containers still open: completed sub-values are shared between snapshots (never copied, never
changed again), so treat values as read-only. A development install (`make`) compiles this module
with mypyc, which runs each step in about 0.6 of the time; a compiled module older than this source
never runs (`sdk.parsing._reader_build`).
"""

from __future__ import annotations

import json
import json.decoder
import json.scanner
import re
from collections.abc import Callable
from itertools import islice
from typing import Any
from typing import Final
from typing import Generic
from typing import TypeVar

from sdk._values.pointer import escape_pointer
from sdk._values.pointer import lookup
from sdk._values.pointer import pointer_of
from sdk._values.pointer import split_pointer
from sdk._values.position import TextPosition
from sdk.contract import Contract
from sdk.errors import InvalidJSON
from sdk.errors import Violation
from sdk.parsing._limits import MAX_DEPTH
from sdk.parsing._limits import NumberOutOfRange
from sdk.parsing._limits import finite_float
from sdk.parsing._limits import json_int
from sdk.parsing._limits import too_deep

__all__ = ["Partial", "PartialReader"]

C = TypeVar("C", bound=Contract)

# --- Reader states: what may come next (each is read by its step, `_STEPS[state]`). ---
# Between tokens (whitespace is skipped):
_VALUE: Final = 0  # a value: the document's start, after ':', or after ',' in an array
_VALUE_OR_CLOSE: Final = 1  # just after '[': a value or ']'
_KEY_OR_CLOSE: Final = 2  # just after '{': a property name or '}'
_KEY: Final = 3  # after ',' in an object: a property name
_COLON: Final = 4  # after a property name
_AFTER_MEMBER: Final = 5  # after a value in an object: ',' or '}'
_AFTER_ITEM: Final = 6  # after a value in an array: ',' or ']'
_END: Final = 7  # the document is closed: only whitespace may follow
# Inside a token (whitespace is content, or ends the token):
_STRING: Final = 8  # inside a string value (its prefix is visible)
_NAME: Final = 9  # inside a property name (invisible)
_NUMBER: Final = 10  # inside a number: it closes at the first character that cannot extend it
_LITERAL: Final = 11  # inside true, false or null

# What each state expects next, for error messages.
_EXPECTED: Final = {
    _VALUE: "a value",
    _VALUE_OR_CLOSE: "a value or ']'",
    _KEY_OR_CLOSE: "a property name in double quotes or '}'",
    _KEY: "a property name in double quotes",
    _COLON: "':'",
    _AFTER_MEMBER: "',' or '}'",
    _AFTER_ITEM: "',' or ']'",
    _END: "nothing more",
    _STRING: "the rest of the string",
    _NAME: "the rest of the property name",
    _NUMBER: "the rest of the number",
    _LITERAL: "the rest of the literal",
}

# What the open value is, for snapshots: nothing open, a string value (its prefix is
# visible), or a number or literal (invisible until closed).
_OPEN_NONE: Final = 0
_OPEN_STRING: Final = 1
_OPEN_HIDDEN: Final = 2

_WS_RUN: Final = re.compile(r"[ \t\n\r]*")
# A run of string characters that need no decoding (no quote, backslash or control character).
_PLAIN_RUN: Final = re.compile(r'[^"\\\x00-\x1f]*')

# The steps' patterns. Each reads as far as its state's common case goes, every part after the
# first optional, so one match covers a whole member (`, "name": 12`) when it is all there, and
# `lastgroup` (the last group matched) says where it stopped: within the name ("name"), after
# it ("name_end"), after the colon ("colon"), inside a string value ("string"), or after a
# whole value ("closed" string, "literal", "int_end" or "float_end" for a number and the
# delimiter after it). A number is whole only when a delimiter follows it (`12` may become
# `1234`): the pattern takes that delimiter (a lookahead costs more) and the step gives it back;
# without one it ends with "number" or "fraction" (cut by the chunk's end, or malformed).
_WS: Final = r"[ \t\n\r]*"
# Every optional part is written `(?:X|)`, not `(?:X)?`: the same match, and the regular
# expression engine takes an alternative faster than a repeat (a third less time a match).
_A_VALUE: Final = (
    r'(?:"(?P<string>[^"\\\x00-\x1f]*)(?:(?P<closed>")|)'
    r"|(?P<number>-?(?:0|[1-9][0-9]*))"
    r"(?:(?P<fraction>\.[0-9]+(?:[eE][-+]?[0-9]+|)|[eE][-+]?[0-9]+)"
    r"(?:(?P<float_end>[ \t\n\r,\]}])|)|(?P<int_end>[ \t\n\r,\]}])|)"
    r"|(?P<literal>true|false|null)|)"
)
_REST_OF_MEMBER: Final = (
    rf'(?P<name>[^"\\\x00-\x1f]*)(?:(?P<name_end>"){_WS}(?:(?P<colon>:){_WS}{_A_VALUE}|)|)'
)
_VALUE_START: Final = re.compile(rf"{_WS}{_A_VALUE}")
_FIRST_MEMBER: Final = re.compile(rf'{_WS}"{_REST_OF_MEMBER}')
_NEXT_MEMBER: Final = re.compile(rf'{_WS},{_WS}(?:"{_REST_OF_MEMBER}|)')
_NAME_REST: Final = re.compile(_REST_OF_MEMBER)
_COLON_VALUE: Final = re.compile(rf"{_WS}(?P<colon>:){_WS}{_A_VALUE}")
_LITERAL_VALUES: Final[dict[str, bool | None]] = {"true": True, "false": False, "null": None}
# The groups a pattern ends with when it read a whole value.
_WHOLE_VALUE: Final = frozenset({"closed", "int_end", "float_end", "literal"})
# ... and of those, the ones that took the delimiter after the value.
_DELIMITED: Final = frozenset({"int_end", "float_end"})
_WHITESPACE: Final = " \t\n\r"
_INFINITY: Final = float("inf")
# The characters a number may go on with (checked whole by `_NUMBER_TOKEN` after).
_NUMBER_RUN: Final = re.compile(r"[0-9.eE+-]*")
_NUMBER_TOKEN: Final = re.compile(r"-?(?:0|[1-9][0-9]*)(?:(\.[0-9]+)|)(?:([eE][-+]?[0-9]+)|)")
_HEX: Final = frozenset("0123456789abcdefABCDEF")
_ESCAPES: Final = {
    '"': '"',
    "\\": "\\",
    "/": "/",
    "b": "\b",
    "f": "\f",
    "n": "\n",
    "r": "\r",
    "t": "\t",
}
_LITERALS: Final[dict[str, tuple[str, bool | None]]] = {
    "t": ("true", True),
    "f": ("false", False),
    "n": ("null", None),
}

# Number states: a small DFA, used only when a number is cut by a chunk's end or malformed.
_N_MINUS, _N_ZERO, _N_INT, _N_DOT, _N_FRAC, _N_E, _N_ESIGN, _N_EXP = range(8)
_N_ACCEPTING: Final = frozenset({_N_ZERO, _N_INT, _N_FRAC, _N_EXP})

# A container that starts this many characters or more before the end of the buffer is first
# offered whole to the C scanner; closer to the end it almost never fits, and trying is waste.
_FAST_PATH_MIN: Final = 128
# Failed C-scanner attempts allowed per chunk. Each one reads at most the rest of the buffer,
# so this bound keeps the fast path linear however deeply the chunk nests.
_FAST_PATH_FAILURES: Final = 2

_MISSING: Final[Any] = object()


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


# The standard library's C scanners (typeshed does not describe them): a whole value, a string.
_scan_value: Final[Callable[[str, int], tuple[Any, int]]] = json.scanner.make_scanner(
    json.JSONDecoder(parse_constant=_reject_constant, parse_float=finite_float)  # type: ignore[arg-type]
)
_StringScanner = Callable[[str, int, bool], tuple[str, int]]
_scan_string: Final[_StringScanner] = json.decoder.scanstring  # type: ignore[attr-defined]

# A snapshot's state, one flat tuple (cheap to take at every chunk):
# (contract, text_length, done, root, frames, top, top_length, key, open_kind, pieces, n_pieces,
#  joined)
# `frames` is a linked list, innermost first, of (container, length, key, outer frames) for each
# open container around `top`: pushing and popping cost O(1) at any depth, and snapshots share
# it. `top` is the innermost open container (or None); `key` the name whose value is open in
# `top` when it is a dict; `pieces` the open string's decoded pieces, and `joined` a cell
# shared by the snapshots of that string: the longest prefix built so far, and of how many
# pieces (so reading every snapshot's value copies the prefix once, not every piece again).
_State = tuple[Any, ...]
_Frames = tuple[Any, int, "str | None", Any] | None
_NO_FRAMES: Final = (None, 0, None, None)  # what popping the outermost container leaves


class Partial(Generic[C]):
    """A snapshot of a document being streamed: read-only, taken in O(1).

    Never validated: a partial value runs no schema, contract, semantic or cross-field check.
    `.value` is built on first access (copying only the containers still open) and cached.
    """

    __slots__ = ("_complete", "_state", "_value")

    # `_value` and `_complete` stay unset until first read: a snapshot is taken at almost every
    # chunk and most are never read, so the constructor stores the state and nothing else.
    _value: Any
    _complete: frozenset[str]

    def __init__(self, state: _State) -> None:
        self._state = state

    def __reduce__(self) -> tuple[Any, ...]:
        # Pickled and copied by its state alone (the value is built again on first read): the
        # compiled build (`sdk.parsing._reader_build`) cannot make one without its constructor.
        return (Partial, (self._state,))

    @property
    def contract(self) -> type[C]:
        """The contract the document is meant to become (snapshots are never validated)."""
        contract: type[C] = self._state[0]
        return contract

    @property
    def attempt(self) -> int:
        """Which attempt of the call this snapshot belongs to (1 first): after a retry the
        document starts again from empty, and this says why."""
        attempt: int = self._state[-1]
        return attempt

    @property
    def text_length(self) -> int:
        """How many characters of the text this snapshot reflects."""
        length: int = self._state[1]
        return length

    @property
    def done(self) -> bool:
        """Whether the whole document is closed (then `.value` equals `json.loads(text)`)."""
        done: bool = self._state[2]
        return done

    @property
    def value(self) -> Any:
        """The JSON value so far (plain dicts, lists, strings, numbers); read-only."""
        try:
            return self._value
        except AttributeError:
            self._value = value = _materialize(self._state)
            return value

    @property
    def open_pointer(self) -> str | None:
        """JSON pointer of the innermost value started and not closed; `None` once done."""
        path = self._open_path()
        return None if path is None else pointer_of(path)

    @property
    def complete(self) -> frozenset[str]:
        """JSON pointers of every complete value in `.value` (`""`, the root, once done)."""
        try:
            return self._complete
        except AttributeError:
            pass
        found: list[str] = []
        _pointers(self.value, "", found)
        path = self._open_path()
        still_open = set() if path is None else {pointer_of(path[:i]) for i in range(len(path) + 1)}
        self._complete = frozenset(p for p in found if p not in still_open)
        return self._complete

    def is_complete(self, pointer: str = "") -> bool:
        """Whether the value at `pointer` is present and closed (`""`: the whole document)."""
        found, _ = self._closed(split_pointer(pointer))
        return found

    def get(self, pointer: str, default: Any = None) -> Any:
        """The value at `pointer`, complete or not, or `default` if it is not there (yet)."""
        tokens = split_pointer(pointer)
        found, value = self._closed(tokens)  # a closed value needs no `.value` built
        if not found:
            found, value = lookup(self.value, tokens)
        return value if found else default

    def _closed(self, tokens: list[str]) -> tuple[bool, Any]:
        """`(True, value)` if the value at `tokens` is present and closed, found without building
        `.value` (a consumer that takes each list item as it closes would copy the open list
        at every snapshot): an open container is read only as far as this snapshot saw it,
        and the closed values in it are shared and never change."""
        _, _, done, root, frames, top, top_length, key, open_kind, *_ = self._state
        if done:
            return lookup(root, tokens)
        if top is None:
            return False, None  # a document that is one open scalar, or nothing yet
        # The open containers, outermost first: each with how much of it this snapshot saw and
        # the token of its open child (the next container; in `top`, the open scalar if any).
        chain = [(top, top_length, _child_token(top, top_length, key, open_kind != _OPEN_NONE))]
        while frames is not None:
            container, length, name, frames = frames
            chain.append((container, length, _child_token(container, length, name, True)))
        chain.reverse()
        for depth, (container, length, open_child) in enumerate(chain):
            if depth == len(tokens):
                return False, None  # an open container
            token = tokens[depth]
            if token == open_child:
                if depth == len(chain) - 1:
                    return False, None  # the open scalar
                continue
            found, value = _seen_item(container, length, token)
            return lookup(value, tokens[depth + 1 :]) if found else (False, None)
        return False, None  # (not reached: the innermost level returns)

    def _open_path(self) -> list[str | int] | None:
        _, _, done, _, frames, top, top_length, key, open_kind, *_ = self._state
        if done:
            return None
        path: list[str | int] = []
        if top is not None and open_kind != _OPEN_NONE:
            path.append(top_length if type(top) is list else key)
        while frames is not None:
            container, length, name, frames = frames
            path.append(length if type(container) is list else name)
        path.reverse()
        return path

    def __repr__(self) -> str:
        where = "done" if self.done else f"open at {self.open_pointer!r}"
        name = self.contract.__name__
        return f"Partial[{name}]({self.value!r}, {where}, text_length={self.text_length})"


class PartialReader(Generic[C]):
    """Reads one JSON document chunk by chunk; `feed` returns a new `Partial` when it advanced.

    The state is kept between chunks, so a whole stream costs time linear in its length. A
    snapshot is returned at most once per `feed`, and only when the visible state changed: a
    container or a string value started, a string value grew, or a value closed. Whitespace,
    punctuation, property names, and cut escapes, numbers and literals change nothing visible.
    """

    def __reduce__(self) -> tuple[Any, ...]:
        # Through the constructor, then every field: the compiled build cannot make a reader
        # without its constructor (pickle's default would).
        return (_restored_reader, (self.contract, self.attempt, self.__getstate__()))

    def __init__(self, contract: type[C], *, attempt: int = 1) -> None:
        self.contract = contract
        self.attempt = attempt
        """Which attempt of a call this document is (stamped on every snapshot)."""
        self._rescanned = 0  # characters read again (a kept tail, a failed C-scanner attempt)
        self._chunks: list[str] = []
        self._length = 0  # characters fed so far
        # Unread text kept for the next chunk: only a cut escape (<= 12 chars). It ends the text
        # fed so far, so it starts at `_length - len(_tail)`.
        self._tail = ""
        # In a string value with nothing kept back and no error: `feed`'s shortcut applies.
        self._plain_string = False
        self._state = _VALUE
        # The open containers: the innermost one, its open property name, and the outer ones.
        self._top: Any = None
        self._key: str | None = None
        self._frames: _Frames = None
        self._depth = 0  # how many containers are open
        self._root: Any = None
        self._open_kind = _OPEN_NONE
        # The open property name's decoded pieces; the open string value's, and a cell of
        # their longest prefix joined so far (shared by that string's snapshots).
        self._name: list[str] = []
        self._pieces: list[str] = []
        self._joined: list[tuple[str, int]] = [("", 0)]
        # The open number's text and DFA state, or the open literal and how much of it was read.
        self._number: list[str] = []
        self._number_state = _N_MINUS
        self._literal = ""
        self._literal_read = 0
        # Visible changes so far, and how many the last snapshot handed out had seen.
        self._version = 0
        self._emitted = 0
        self._latest: Partial[C] | None = None
        self._error: InvalidJSON | None = None
        self._finished = False
        self._fast_failures = 0  # failed C-scanner attempts in the current chunk

    # --- Public API ---

    @property
    def text(self) -> str:
        """The whole text fed so far."""
        if len(self._chunks) > 1:
            self._chunks = ["".join(self._chunks)]
        return self._chunks[0] if self._chunks else ""

    @property
    def chars_scanned(self) -> int:
        """Characters read so far, re-read ones included (a cut escape, a failed fast path)."""
        return self._length + self._rescanned

    @property
    def latest(self) -> Partial[C] | None:
        """The last snapshot handed out (it shows the current visible state), if any."""
        return self._latest

    def feed(self, chunk: str) -> Partial[C] | None:
        """Read `chunk`; a new snapshot if the visible state advanced, else `None`.

        Raises `InvalidJSON` as soon as the text cannot be the start of a JSON document (and
        again on every later call).
        """
        if (
            self._plain_string
            and chunk
            and '"' not in chunk
            and "\\" not in chunk
            and (chunk.isprintable() or _PLAIN_RUN.fullmatch(chunk) is not None)
        ):
            # The commonest chunk of all: more plain text of the open string value. Kept to
            # the fewest steps (the snapshot inlined; `_version` and `_emitted` are equal before
            # and after), because its cost is paid at every delta of a long text.
            self._chunks.append(chunk)
            pieces = self._pieces
            pieces.append(chunk)
            self._length = length = self._length + len(chunk)
            top = self._top
            partial: Partial[C] = Partial(
                (
                    self.contract,
                    length,
                    False,
                    self._root,
                    self._frames,
                    top,
                    0 if top is None else len(top),
                    self._key,
                    _OPEN_STRING,
                    pieces,
                    len(pieces),
                    self._joined,
                    self.attempt,
                )
            )
            self._latest = partial
            return partial
        if self._read_chunk(chunk):
            return self._snapshot()
        return None

    def finish(self) -> Partial[C]:
        """The end of the stream: the final snapshot, or `InvalidJSON` if the document is open."""
        if self._error is not None:
            raise self._error
        if not self._finished:
            if self._state == _NUMBER and self._top is None and self._number_state in _N_ACCEPTING:
                # A bare number as the whole document: the end of the text closes it.
                try:
                    self._root = self._number_value("", 0)
                except InvalidJSON as error:
                    self._error = error
                    raise
                self._state = _END
                self._open_kind = _OPEN_NONE
                self._version += 1
            if self._state != _END:
                self._plain_string = False
                self._error = self._fail(
                    0, f"the text ended inside the document: {_EXPECTED[self._state]} expected", ""
                )
                raise self._error
            self._finished = True
        if self._latest is None or self._version != self._emitted:
            return self._snapshot()
        return self._latest

    # --- Reading: one step of the current state at a time ---
    #
    # `_STEPS[state]` is the step for each state. A step reads from `pos` as far as its state's
    # common case reaches in one regular expression (a member's comma, name, colon and scalar
    # value are one match), updates the reader's state and returns where it stopped. The
    # careful paths (escapes, cut numbers and literals, errors) are steps of their own.

    def _read_chunk(self, chunk: str) -> bool:
        """Read `chunk` (after the kept tail): whether the visible state changed."""
        if self._error is not None:
            raise self._error
        if self._finished:
            raise RuntimeError("feed() after finish(): this reader's document is closed")
        if not chunk:
            return False
        self._chunks.append(chunk)
        self._length += len(chunk)
        buf = chunk
        if self._tail:
            self._rescanned += len(self._tail)
            buf = self._tail + chunk
            self._tail = ""
        self._fast_failures = 0
        pos = 0
        n = len(buf)
        steps = _STEPS
        try:
            while pos < n:
                pos = steps[self._state](self, buf, pos)
        except InvalidJSON as error:
            self._error = error
            self._plain_string = False
            raise
        self._plain_string = self._state == _STRING and not self._tail
        return self._version != self._emitted

    def _read_value(self, buf: str, pos: int) -> int:
        """`_VALUE`, `_VALUE_OR_CLOSE`: a value starts (after '[', the array may close)."""
        match = _VALUE_START.match(buf, pos)
        assert match is not None  # every part of the pattern is optional
        if match.lastgroup is not None:
            return self._took_value(match, buf)
        pos = match.end()
        if pos == len(buf):
            return pos
        char = buf[pos]
        if char == "{" or char == "[":
            return self._open_container(buf, pos)
        if char == "-" or "0" <= char <= "9":
            return self._start_number(buf, pos)
        if char in _LITERALS:
            return self._start_literal(buf, pos)
        if char == "]" and self._state == _VALUE_OR_CLOSE:
            return self._close_container(pos)
        raise self._fail(pos, f"{_EXPECTED[self._state]} expected", buf)

    def _read_member_start(self, buf: str, pos: int) -> int:
        """`_KEY_OR_CLOSE`, `_KEY`: a property name (after '{', the object may close)."""
        match = _FIRST_MEMBER.match(buf, pos)
        if match is not None:
            return self._took_member(match, buf, match["name"])
        pos = _skip_whitespace(buf, pos)
        if pos == len(buf):
            return pos
        if buf[pos] == "}" and self._state == _KEY_OR_CLOSE:
            return self._close_container(pos)
        raise self._fail(pos, f"{_EXPECTED[self._state]} expected", buf)

    def _read_after_member(self, buf: str, pos: int) -> int:
        """`_AFTER_MEMBER`: ',' and the next member, or '}'."""
        if buf[pos] == "}":
            return self._close_container(pos)
        match = _NEXT_MEMBER.match(buf, pos)
        if match is not None:
            if match.lastgroup is None:  # the comma, and the end of the buffer
                self._state = _KEY
                return match.end()
            return self._took_member(match, buf, match["name"])
        pos = _skip_whitespace(buf, pos)
        if pos == len(buf):
            return pos
        if buf[pos] == "}":
            return self._close_container(pos)
        raise self._fail(pos, "',' or '}' expected", buf)

    def _read_after_item(self, buf: str, pos: int) -> int:
        """`_AFTER_ITEM`: ',' and the next item, or ']'."""
        char = buf[pos]
        if char == ",":
            self._state = _VALUE
            pos += 1
            n = len(buf)
            if pos < n and buf[pos] == " ":  # the usual single space
                pos += 1
            if pos < n and buf[pos] == "{":  # the usual next item: open it now
                return self._open_container(buf, pos)
            return pos
        if char == "]":
            return self._close_container(pos)
        if char in _WHITESPACE:
            return _skip_whitespace(buf, pos)
        raise self._fail(pos, "',' or ']' expected", buf)

    def _read_colon(self, buf: str, pos: int) -> int:
        """`_COLON`: the colon after a property name (cut from it), and the value after it."""
        match = _COLON_VALUE.match(buf, pos)
        if match is not None:
            if match.lastgroup == "colon":
                self._state = _VALUE
                return match.end()
            return self._took_value(match, buf)
        pos = _skip_whitespace(buf, pos)
        if pos == len(buf):
            return pos
        raise self._fail(pos, "':' expected after the property name", buf)

    def _read_end(self, buf: str, pos: int) -> int:
        """`_END`: the document is closed; only whitespace may follow."""
        pos = _skip_whitespace(buf, pos)
        if pos < len(buf):
            raise self._fail(pos, "extra data after the end of the document", buf)
        return pos

    def _read_string(self, buf: str, pos: int) -> int:
        """`_STRING`: more of an open string value (each piece is visible), up to its quote."""
        end = _PLAIN_RUN.match(buf, pos).end()  # type: ignore[union-attr]
        if end > pos:
            self._pieces.append(buf[pos:end])
            self._version += 1
            if end == len(buf):
                return end
        char = buf[end]
        if char == '"':
            self._attach("".join(self._pieces))
            return end + 1
        if char == "\\":
            decoded = self._escape(buf, end)
            if decoded is None:  # cut by the chunk's end: kept for the next one
                self._tail = buf[end:]
                return len(buf)
            text, after = decoded
            self._pieces.append(text)
            self._version += 1
            return after
        raise self._fail(end, f"control character {char!r} in a string", buf)

    def _read_name(self, buf: str, pos: int) -> int:
        """`_NAME`: more of a property name cut by a chunk's end (invisible), then its member."""
        match = _NAME_REST.match(buf, pos)
        assert match is not None  # the name's characters may be none
        if match.lastgroup != "name":
            head = "".join(self._name)
            self._name = []
            return self._took_member(match, buf, head + match["name"])
        end = match.end()
        if end > pos:
            self._name.append(match["name"])
            if end == len(buf):
                return end
        char = buf[end]
        if char == "\\":
            decoded = self._escape(buf, end)
            if decoded is None:
                self._tail = buf[end:]
                return len(buf)
            text, after = decoded
            self._name.append(text)
            return after
        raise self._fail(end, f"control character {char!r} in a string", buf)

    def _read_number_rest(self, buf: str, pos: int) -> int:
        """`_NUMBER`: more of a number cut by a chunk's end (invisible until it closes)."""
        run = _NUMBER_RUN.match(buf, pos).end()  # type: ignore[union-attr]
        if run < len(buf):
            token = "".join(self._number) + buf[pos:run]
            if _NUMBER_TOKEN.fullmatch(token) is not None:  # closed, and well formed
                self._number = []
                self._attach(self._number_of(token, buf, run - len(token)))
                return run
        # Still cut, or malformed: the careful path says where it stops or fails.
        end = self._read_number(buf, pos)
        if end < 0:
            return len(buf)
        self._attach(self._number_value(buf, end))
        return end

    def _read_literal_rest(self, buf: str, pos: int) -> int:
        """`_LITERAL`: more of `true`, `false` or `null` cut by a chunk's end."""
        word = self._literal
        read = self._literal_read
        n = len(buf)
        while pos < n and read < len(word):
            if buf[pos] != word[read]:
                raise self._fail(pos, f"invalid literal ({word!r} expected)", buf)
            pos += 1
            read += 1
        self._literal_read = read
        if read == len(word):
            self._attach(_LITERALS[word[0]][1])
        return pos

    # --- Steps' shared parts ---

    def _took_member(self, match: re.Match[str], buf: str, key: str) -> int:
        """A member read by a pattern as far as it reached: its name, colon and value."""
        last = match.lastgroup
        if last in _WHOLE_VALUE:  # the commonest: the member is whole, it joins the object
            if last == "closed":
                value = match["string"]
            elif last == "int_end" and len(token := match["number"]) < 19:
                value = int(token)  # a short integer: no range check
            else:
                value = self._scalar(match, buf, last)
            top = self._top
            if key in top:  # a repeated name: see `_attach`
                top = self._top = dict(top)
            top[key] = value
            self._version += 1
            self._state = _AFTER_MEMBER
            return match.end() - 1 if last in _DELIMITED else match.end()
        if last == "name":  # the name goes on: an escape, a control character, or the end
            self._name = [key]
            self._state = _NAME
            return match.end()
        self._key = key
        if last == "string":
            return self._open_string(match, buf)
        if last == "number" or last == "fraction":  # cut by the chunk's end, or malformed
            return self._start_number(buf, match.start("number"))
        # After the name or its colon: a value that is not read in one step follows.
        self._state = _COLON if last == "name_end" else _VALUE
        return match.end()

    def _took_value(self, match: re.Match[str], buf: str) -> int:
        """A value read by a pattern: attach it, or open the string it starts."""
        last = match.lastgroup
        if last in _WHOLE_VALUE:
            self._attach(self._scalar(match, buf, last))
            return match.end() - 1 if last in _DELIMITED else match.end()
        if last == "string":
            return self._open_string(match, buf)
        return self._start_number(buf, match.start("number"))  # cut, or malformed

    def _scalar(self, match: re.Match[str], buf: str, last: str | None) -> Any:
        """The whole scalar value a pattern read (`last`: the group it ended with)."""
        if last == "closed":
            return match["string"]
        if last == "int_end":
            token = match["number"]
            if len(token) < 19:  # a short integer: no range check
                return int(token)
            return self._number_of(token, buf, match.start("number"))
        if last == "float_end":
            start = match.start("number")
            token = buf[start : match.end() - 1]
            value = float(token)
            if -_INFINITY < value < _INFINITY:
                return value
            return self._number_of(token, buf, start)  # out of range: says so
        return _LITERAL_VALUES[match["literal"]]

    def _open_string(self, match: re.Match[str], buf: str) -> int:
        """A string value whose plain start `match` read: whole through the C decoder if it is
        all here with escapes, else open (visible from its quote on)."""
        start = match.start("string")
        end = match.end()
        n = len(buf)
        if end < n and buf[end] == "\\":
            try:
                value, after = _scan_string(buf, start, True)
            except ValueError:  # cut or malformed: the careful path
                self._rescanned += n - start
            else:
                self._attach(value)
                return after
        plain = match["string"]
        self._pieces = [plain] if plain else []
        self._joined = [("", 0)]
        self._open_kind = _OPEN_STRING
        self._state = _STRING
        self._version += 1  # an empty string is visible too
        return end

    def _start_number(self, buf: str, pos: int) -> int:
        """A number no pattern could read whole: cut by the chunk's end, or malformed."""
        match = _NUMBER_TOKEN.match(buf, pos)
        if match is not None and match.end() == len(buf):  # well formed so far: keep it
            token = match.group()
            self._number = [token]
            if match[2]:
                self._number_state = _N_EXP
            elif match[1]:
                self._number_state = _N_FRAC
            else:
                self._number_state = _N_ZERO if token in ("0", "-0") else _N_INT
            pos = len(buf)
        else:
            char = buf[pos]
            self._number = [char]
            self._number_state = _N_MINUS if char == "-" else _N_ZERO if char == "0" else _N_INT
            pos += 1
        self._open_kind = _OPEN_HIDDEN
        self._state = _NUMBER
        return pos

    def _start_literal(self, buf: str, pos: int) -> int:
        """`true`, `false` or `null` cut by the chunk's end (or misspelt): read it char by char."""
        self._literal = _LITERALS[buf[pos]][0]
        self._literal_read = 1
        self._open_kind = _OPEN_HIDDEN
        self._state = _LITERAL
        return pos + 1

    def _attach(self, value: Any) -> None:
        """A value closed: it joins its container (or is the whole document)."""
        self._version += 1
        self._open_kind = _OPEN_NONE
        top = self._top
        if type(top) is dict:
            key = self._key
            if key in top:
                # A repeated name: the last one wins, as in json.loads. Copy first, because
                # snapshots already handed out may share this dict.
                top = self._top = dict(top)
            top[key] = value
            self._state = _AFTER_MEMBER
        elif top is None:
            self._root = value
            self._state = _END
        else:
            top.append(value)
            self._state = _AFTER_ITEM

    def _open_container(self, buf: str, pos: int) -> int:
        """'{' or '[': the whole container through the C scanner if it is here, else open it."""
        if len(buf) - pos >= _FAST_PATH_MIN and self._fast_failures < _FAST_PATH_FAILURES:
            end = self._scan_whole(buf, pos)
            if end >= 0:
                return end
        if self._depth >= MAX_DEPTH:
            raise self._fail(pos, f"nested deeper than {MAX_DEPTH} levels", buf)
        self._depth += 1
        top = self._top
        if top is not None:
            self._frames = (top, len(top), self._key, self._frames)
        if buf[pos] == "{":
            self._top = {}
            self._state = _KEY_OR_CLOSE
        else:
            self._top = []
            self._state = _VALUE_OR_CLOSE
        self._key = None
        self._open_kind = _OPEN_NONE
        self._version += 1  # an empty container is visible
        if pos + 1 < len(buf) and self._state == _KEY_OR_CLOSE:  # its first member, now
            return self._read_member_start(buf, pos + 1)
        return pos + 1

    def _scan_whole(self, buf: str, pos: int) -> int:
        """The container at `pos` read whole by the C scanner and attached: the position after
        it, or -1 if it is cut, malformed or too deep (the careful path then reads it)."""
        try:
            value, end = _scan_value(buf, pos)
        except (ValueError, StopIteration, RecursionError):
            self._fast_failures += 1
            self._rescanned += len(buf) - pos
            return -1
        brackets = buf.count("[", pos, end) + buf.count("{", pos, end)
        if self._depth + brackets > MAX_DEPTH and too_deep(value, start=self._depth):
            # Too deep: the careful path says where, as for any text.
            self._fast_failures = _FAST_PATH_FAILURES
            return -1
        self._attach(value)
        return end

    def _close_container(self, pos: int) -> int:
        """'}' or ']' at `pos`: the innermost container closes and joins its parent."""
        value = self._top
        self._top, _, self._key, self._frames = self._frames or _NO_FRAMES
        self._depth -= 1
        self._attach(value)
        return pos + 1

    def _read_number(self, buf: str, pos: int) -> int:
        """Extend the open number: the position of the first character after it, or -1 if the
        buffer ended inside it. Raises at the first character that makes it impossible."""
        state = self._number_state
        start = pos
        n = len(buf)
        while pos < n:
            char = buf[pos]
            digit = "0" <= char <= "9"
            if state in (_N_INT, _N_FRAC, _N_EXP):
                if digit:
                    pos += 1
                    continue
                if state != _N_EXP and char in "eE":
                    state = _N_E
                elif state == _N_INT and char == ".":
                    state = _N_DOT
                else:
                    break
            elif state == _N_MINUS:
                if not digit:
                    raise self._fail(pos, "a digit expected after '-'", buf)
                state = _N_ZERO if char == "0" else _N_INT
            elif state == _N_ZERO:
                if char == ".":
                    state = _N_DOT
                elif char in "eE":
                    state = _N_E
                elif digit:
                    raise self._fail(pos, "a number cannot have a leading zero", buf)
                else:
                    break
            elif state == _N_DOT:
                if not digit:
                    raise self._fail(pos, "a digit expected after '.'", buf)
                state = _N_FRAC
            elif state == _N_E:
                if char in "+-":
                    state = _N_ESIGN
                elif digit:
                    state = _N_EXP
                else:
                    raise self._fail(pos, "a digit expected in the exponent", buf)
            else:  # _N_ESIGN
                if not digit:
                    raise self._fail(pos, "a digit expected in the exponent", buf)
                state = _N_EXP
            pos += 1
        self._number.append(buf[start:pos])
        self._number_state = state
        return -1 if pos == n else pos

    def _number_value(self, buf: str, end: int) -> int | float:
        """The open number, which ends at `buf[end]` (it may have started in earlier chunks)."""
        token = "".join(self._number)
        self._number = []
        return self._number_of(token, buf, end - len(token))

    def _number_of(self, token: str, buf: str, pos: int) -> int | float:
        """A closed number token that starts at `buf[pos]`; `InvalidJSON` if out of range."""
        try:
            if "." in token or "e" in token or "E" in token:
                return finite_float(token)
            return json_int(token)
        except NumberOutOfRange as error:
            raise self._fail(pos, str(error), buf) from error

    def _escape(self, buf: str, pos: int) -> tuple[str, int] | None:
        """Decode the escape at `buf[pos]` (a backslash): (text, position after it), or `None`
        if the buffer ends before it is decided: a cut escape, or a high surrogate whose low
        half may still follow. Decodes as `json.loads` does, lone surrogates included."""
        n = len(buf)
        if pos + 1 >= n:
            return None
        kind = buf[pos + 1]
        simple = _ESCAPES.get(kind)
        if simple is not None:
            return simple, pos + 2
        if kind != "u":
            raise self._fail(pos + 1, f"invalid escape '\\{kind}'", buf)
        code = self._hex4(buf, pos + 2)
        if code is None:
            return None
        after = pos + 6
        if 0xD800 <= code <= 0xDBFF:  # a high surrogate: joins a low one if one follows
            if after >= n or (buf[after] == "\\" and after + 1 >= n):
                return None
            if buf[after] == "\\" and buf[after + 1] == "u":
                low = self._hex4(buf, after + 2)
                if low is None:
                    return None
                if 0xDC00 <= low <= 0xDFFF:
                    return chr(0x10000 + (((code - 0xD800) << 10) | (low - 0xDC00))), after + 6
        return chr(code), after

    def _hex4(self, buf: str, pos: int) -> int | None:
        """The four hex digits at `pos`; `None` if the buffer ends first; raises on a non-hex."""
        for index in range(pos, min(pos + 4, len(buf))):
            if buf[index] not in _HEX:
                raise self._fail(index, "four hex digits expected after '\\u'", buf)
        if pos + 4 > len(buf):
            return None
        return int(buf[pos : pos + 4], 16)

    # --- Snapshots and errors ---

    def _snapshot(self) -> Partial[C]:
        self._emitted = self._version
        top = self._top
        pieces = self._pieces
        partial: Partial[C] = Partial(
            (
                self.contract,
                self._length,
                self._state == _END,
                self._root,
                self._frames,
                top,
                0 if top is None else len(top),
                self._key,
                self._open_kind,
                pieces,
                len(pieces),
                self._joined,
                self.attempt,
            )
        )
        self._latest = partial
        return partial

    def _fail(self, pos: int, message: str, buf: str) -> InvalidJSON:
        """An `InvalidJSON` for the character at `buf[pos]`, positioned in the whole text."""
        # `buf` (the kept tail and the chunk being read, or "" at the end) ends the text.
        text = self.text
        where = TextPosition.of(text, self._length - len(buf) + pos)
        found = repr(text[where.index]) if where.index < len(text) else "the end of the text"
        return InvalidJSON(
            f"output is not JSON: {message} at {where}, found {found}",
            position=where.index,
            line=where.line,
            column=where.column,
            text=text,
            violations=[Violation("", f"{message} at {where.by_index()}", "json")],
        )


_Step = Callable[[PartialReader[Any], str, int], int]
_STEPS: Final[tuple[_Step, ...]] = (
    PartialReader._read_value,  # _VALUE
    PartialReader._read_value,  # _VALUE_OR_CLOSE
    PartialReader._read_member_start,  # _KEY_OR_CLOSE
    PartialReader._read_member_start,  # _KEY
    PartialReader._read_colon,  # _COLON
    PartialReader._read_after_member,  # _AFTER_MEMBER
    PartialReader._read_after_item,  # _AFTER_ITEM
    PartialReader._read_end,  # _END
    PartialReader._read_string,  # _STRING
    PartialReader._read_name,  # _NAME
    PartialReader._read_number_rest,  # _NUMBER
    PartialReader._read_literal_rest,  # _LITERAL
)


def _restored_reader(contract: type[C], attempt: int, state: Any) -> PartialReader[C]:
    """A reader with the fields of a pickled or copied one (`PartialReader.__reduce__`)."""
    reader = PartialReader(contract, attempt=attempt)
    for name, value in state.items():
        setattr(reader, name, value)
    return reader


def _skip_whitespace(buf: str, pos: int) -> int:
    """The position of the first non-whitespace character at or after `pos` (or the end)."""
    return _WS_RUN.match(buf, pos).end()  # type: ignore[union-attr]


# --- Snapshot helpers ---


def _child_token(container: Any, length: int, name: str | None, is_open: bool) -> str | None:
    """The pointer token of a container's open child (at `length` in a list), if it has one."""
    if not is_open:
        return None
    return str(length) if type(container) is list else name


def _seen_item(container: Any, length: int, token: str) -> tuple[bool, Any]:
    """The item `token` names among the first `length` items of an open container (the ones a
    snapshot saw: items are only ever added after them)."""
    found, value = lookup(container, [token])
    if not found or len(container) == length:
        return found, value
    if type(container) is list:
        return (True, value) if int(token) < length else (False, None)
    return (True, value) if token in islice(container, length) else (False, None)


def _materialize(state: _State) -> Any:
    """A snapshot's value: copies of the open containers around the shared completed values."""
    _, _, done, root, frames, top, top_length, key, open_kind, pieces, n_pieces, joined, _ = state
    if done:
        return root
    child: Any = _prefix(pieces, n_pieces, joined) if open_kind == _OPEN_STRING else _MISSING
    if top is None:
        return None if child is _MISSING else child
    levels = [(top, top_length, key)]
    while frames is not None:
        container, length, name, frames = frames
        levels.append((container, length, name))
    for container, length, name in levels:
        copy: Any
        if type(container) is list:
            copy = container[:length]
            if child is not _MISSING:
                copy.append(child)
        else:
            # Only new names are ever added to an open dict (a repeated one replaces the dict),
            # so its first `length` items are the ones this snapshot saw.
            copy = (
                container.copy()
                if len(container) == length
                else dict(islice(container.items(), length))
            )
            if child is not _MISSING:
                copy[name] = child
        child = copy
    return child


def _prefix(pieces: list[str], count: int, joined: list[tuple[str, int]]) -> str:
    """The open string's first `count` pieces joined, extending the shared longest prefix."""
    text, covered = joined[0]
    if covered == count:
        return text
    if covered > count:  # an older snapshot, read after a newer one
        return "".join(pieces[:count])
    text = text + "".join(pieces[covered:count])
    joined[0] = (text, count)  # one store: safe if snapshots are read from several threads
    return text


def _pointers(value: Any, pointer: str, found: list[str]) -> None:
    """Every pointer in `value` (iterative: documents may nest deeper than Python recurses)."""
    pending = [(pointer, value)]
    while pending:
        pointer, value = pending.pop()
        found.append(pointer)
        if type(value) is dict:
            pending.extend((f"{pointer}/{escape_pointer(k)}", v) for k, v in value.items())
        elif type(value) is list:
            pending.extend((f"{pointer}/{index}", item) for index, item in enumerate(value))
