"""The response cache's key: everything that decides an answer, hashed.

sha256 over these ingredients, in pieces, in two parts: what a client's calls have in common
(1, 2, 4 and every field of the request but its messages and source), then the call's own (its
messages and source). Each part is its count of pieces and every piece's length before its
pieces, so no two different requests run together into the same bytes, and a call like the
last but for its messages and source hashes its own part alone (`LastKey`):

1. the entries' `FORMAT`;
2. the provider's scope (`Provider.cache_scope()`): its family, its model (the embedded model:
   the sha256 of its GGUF file), the settings that change what it generates, and where it runs
   (the base URL without its credentials, with its path and query: a deployment, an API
   version; a cloud region and project), and what a setting of the provider's renders the
   request as (llama.cpp's `prompt_template=`: its prompt's digest, `rendered_key`);
3. every field of the request (`CompletionRequest`, one encoder per field, and a test that
   fails when a field has none): what is asked for (the contract's fingerprint, the grammar's
   with its description, or the tools with `tool_choice` and `parallel_tool_calls`), the
   messages (roles, texts, images and PDFs by the sha256 of their bytes with their media type
   or name, URLs, tool calls and results), the system prompt, `max_tokens`, the sampling
   options, `extra_body`, native reasoning and the source document (hashed once: where the
   prompt's turn holds it, it is named by its place there and its length, and a source long
   enough to be remembered, `REMEMBERED_FROM`, is hashed by itself, that text hashed as the
   text before it, the source's digest and the text after it);
4. the schema as the provider's dialect writes it (what reaches the wire).

What does not change from call to call (a dialect's schema, a grammar's fingerprint) is hashed
once per object and remembered, and so are the digests of the last few documents calls carried
(source texts, image and PDF bytes), so a hit costs little more than hashing the prompt.
"""

from __future__ import annotations

import array
import dataclasses
import datetime
import decimal
import fractions
import hashlib
import json
import operator
import pathlib
import secrets
import sys
import uuid
import zoneinfo
from collections.abc import Callable
from collections.abc import Iterable
from collections.abc import Mapping
from enum import Enum
from types import MappingProxyType
from typing import Any
from typing import Final
from typing import TypeAlias
from typing import TypeVar
from typing import assert_never
from typing import cast

from sdk import _fork
from sdk._message import Message
from sdk._tools import Tool
from sdk._tools import ToolOffer
from sdk._values.content import Image
from sdk._values.content import Text
from sdk._values.kept import KEPT_TEXT
from sdk._values.kept import Kept
from sdk.cache._entry import FORMAT
from sdk.providers._base import CompletionRequest
from sdk.providers._base import FreeText
from sdk.providers._base import GrammarSentence
from sdk.providers._base import JsonDocument
from sdk.providers._base import Output
from sdk.providers._base import Sampling
from sdk.providers._profile import NO_SAMPLING
from sdk.providers._provider import plain_text
from sdk.providers._provider import token_of
from sdk.schema.canonical import schema_info

__all__ = ["INGREDIENTS", "LastKey", "cache_key", "rendered_key", "settings_digest", "source_place"]

Feed = Callable[[bytes], None]


def _sent_as_object(value: object) -> dict[Any, Any]:
    """A mapping that is not a `dict`, as the object the wire sends (`check_json_body` lets
    any mapping into an `extra_body`, and `merge_extra` sends it as a `dict`); anything else
    JSON cannot carry is a `TypeError` (`check_json_body` lets none into an `extra_body`)."""
    if isinstance(value, Mapping):
        return dict(value)
    raise TypeError(f"a {type(value).__name__} in a request body: JSON cannot carry it")


def _sent_or_shown(value: object) -> object:
    """What the scope's JSON holds of a value JSON does not carry itself: a mapping as the
    object it is sent as, anything else by its `repr` (a setting a provider copies into its
    scope as given)."""
    return dict(value) if isinstance(value, Mapping) else repr(value)


_JSON = json.JSONEncoder(
    ensure_ascii=False, sort_keys=True, separators=(",", ":"), default=_sent_or_shown
)
_BODY_JSON = json.JSONEncoder(
    ensure_ascii=False, sort_keys=True, separators=(",", ":"), default=_sent_as_object
)
"""An `extra_body`'s encoder: it is sent as JSON, so JSON-equal bodies are the same request
and one key; never a value's `repr`, which may be the same for another content."""
_NONE = b"\x00"
_HEAD = b"sdk-cache-key/%d" % FORMAT
_FLAGS = {None: _NONE, False: b"F", True: b"T"}
_BIG_ENDIAN = sys.byteorder == "big"
T = TypeVar("T")


def rendered_key(rendered: object) -> str:
    """What names in a call's key what its request is sent as beyond its fields
    (`Codec.rendered_prompt`: the prompt llama.cpp's `prompt_template=` renders for it): the
    sha256 of text (the same prompt, the same key, whatever made it); of any other value its
    typed text (`plain_text`: token ids), tagged apart from any text's digest; a value that is
    not plain data, or a rendering that failed (given as its exception), a random token of its
    own: that call never hits, nor serves its answer to another."""
    if isinstance(rendered, str):
        return hashlib.sha256(rendered.encode("utf-8", "surrogatepass")).hexdigest()
    text = None if isinstance(rendered, BaseException) else plain_text(rendered)
    if text is None:
        return f"unrendered-{secrets.token_hex(16)}"
    return "value-" + hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()


def settings_digest(settings: Iterable[object]) -> str:
    """A digest of a call's `settings` (what an answer made after retries is kept with:
    `Entry.retried`), each named by its content (`_setting_text`) the same in every process;
    a setting that cannot be so named by a name of its own, never given again (the answer is
    served to no other call: a miss, never another's answer)."""
    values = tuple(settings)
    place = tuple(map(id, values))
    found = _DIGESTS.get(place)
    if found is not None and all(map(operator.is_, found[0], values)):
        return found[1]  # (the same objects, none of which changes: `_may_change`)
    named = [_text_of(value) for value in values]
    text = "\x1f".join(text for text, _ in named)
    digest = hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()[:32]
    if not any(changes for _, changes in named):  # (a `context` holding the caller's lists)
        _remember(_DIGESTS, place, (values, digest))
    return digest


def _text_of(value: object) -> tuple[str, bool]:
    """`value`'s name in a digest (`_setting_text`), and whether it may change while it stays
    the same object (`_may_change`): the name of one that cannot is remembered by the object
    (a `context` named anew beside the call's other settings costs only its own)."""
    found = _TEXTS.get(id(value))
    if found is not None and found[0] is value:
        return found[1], False
    text = _setting_text(value)
    changes = text.startswith(_UNNAMED) or _may_change(value)
    if not changes:
        _remember(_TEXTS, id(value), (value, text))
    return text, changes


def _remember(kept: dict[Any, Any], key: object, value: object) -> None:
    """Keep `value` under `key` in `kept` (`_DIGESTS`, `_TEXTS`, `_FIELDS`), the oldest gone
    past `_DIGESTS_KEPT`."""
    with _digesting:
        kept[key] = value
        while len(kept) > _DIGESTS_KEPT:
            del kept[next(iter(kept))]


_DIGESTS: dict[tuple[int, ...], tuple[tuple[object, ...], str]] = {}
"""The digests of the last settings asked about, by their objects (held, so their ids are never
another's), where none of them may change in place (`_may_change`): a hit on an answer made
after retries asks its call's settings again."""
_TEXTS: dict[int, tuple[object, str]] = {}
"""The names of the last settings that cannot change (`_text_of`), by their objects (held)."""
_DIGESTS_KEPT = 256
_UNNAMED = "unnamed:"
_digesting = _fork.lock()


def _setting_text(value: object) -> str:
    """`value` named by its content (`_plain_form`), or, where it cannot be, by a name never
    given again."""
    try:
        text = plain_text(_plain_form(value, 0, [_PLAIN_NODES]))
    except TypeError:  # (a set's item or a mapping's key whose form cannot be hashed)
        text = None
    return text if text is not None else _UNNAMED + secrets.token_hex(16)


def _may_change(value: object, depth: int = 0) -> bool:
    """Whether what names `value` (`_setting_text`) may change while it stays the same object
    (its digest is then not remembered by the object): anything but plain values, the
    standard library's that cannot change, tuples and records of them, and the SDK's own
    records (a calibration, thresholds, a ramp: frozen, and taken as they were made). A
    `context` holds the caller's own lists, which the validators read as they are now."""
    kind: type[Any] = type(value)
    if value is None or kind in _UNCHANGING or kind in _NAMED_BY_REPR or isinstance(value, Enum):
        return False
    if depth > _PLAIN_DEPTH:
        return True
    if kind is tuple or kind is frozenset:
        return any(_may_change(item, depth + 1) for item in cast("tuple[object, ...]", value))
    compared = _compared_fields(kind)
    if compared is None:
        return True
    if not kind.__dataclass_params__.frozen:
        return True
    if kind.__module__.split(".", 1)[0] == "sdk":
        return False
    return any(_may_change(getattr(value, name), depth + 1) for name in compared)


_UNCHANGING = frozenset({bool, int, float, str, bytes})


def _plain_form(value: object, depth: int, budget: list[int]) -> object:
    """`value` as plain data for `plain_text`, marked apart from plain data that spells it:
    each record (a dataclass's) as its class's name and its compared fields, each `dict` (or
    read-only view of one) as a dict, each set as its items' sorted texts, and each value of
    the standard library's that cannot change (`_NAMED_BY_REPR`: a `Decimal`, a date, a time
    in a `timezone`) as its class's name and its `repr`. Anything else (an object of the
    caller's, a subclass of a list, a mapping of another kind), past `_PLAIN_DEPTH` levels or
    past `budget`'s nodes, is not plain data (`_NOT_PLAIN`: the setting is not named by its
    content)."""
    budget[0] -= 1
    kind: type[Any] = type(value)
    if kind is str:
        text = cast("str", value)
        return "\x00" + text if text.startswith("\x00") else text  # (never one of the marks)
    if value is None or kind in _UNCHANGING:
        return value
    if depth > _PLAIN_DEPTH or budget[0] < 0:
        return _NOT_PLAIN
    if kind is tuple or kind is list:
        items = [_plain_form(item, depth + 1, budget) for item in cast("list[object]", value)]
        return tuple(items) if kind is tuple else items
    if kind is dict or kind is MappingProxyType:
        return {
            _plain_form(key, depth + 1, budget): _plain_form(item, depth + 1, budget)
            for key, item in cast("Mapping[object, object]", value).items()
        }
    if kind is set or kind is frozenset:
        texts = [
            plain_text(_plain_form(item, depth + 1, budget))
            for item in cast("set[object]", value)
        ]  # fmt: skip
        shown = [text for text in texts if text is not None]
        return (_SET, tuple(sorted(shown))) if len(shown) == len(texts) else _NOT_PLAIN
    if kind in _NAMED_BY_REPR and _tz_named(value):
        return (_NAMED, f"{kind.__module__}.{kind.__qualname__}", repr(value))
    if isinstance(value, Enum):
        return value if plain_text(value) is not None else _NOT_PLAIN
    compared = _compared_fields(kind)
    if compared is not None:
        return (_RECORD, f"{kind.__module__}.{kind.__qualname__}", tuple(
            _plain_form(getattr(value, name), depth + 1, budget) for name in compared
        ))  # fmt: skip
    return _NOT_PLAIN


def _tz_named(value: object) -> bool:
    """Whether `value`'s `repr` is its content: a date or time's time zone is none, a
    `timezone` or a `ZoneInfo` (another's `repr` may be an address)."""
    zone = getattr(value, "tzinfo", None)
    return zone is None or type(zone) in (datetime.timezone, zoneinfo.ZoneInfo)


def _compared_fields(kind: type[Any]) -> tuple[str, ...] | None:
    """The compared fields of a dataclass `kind`'s records, `None` for another class (found
    once a class, for the last classes asked)."""
    found = _FIELDS.get(kind, _UNKNOWN)
    if found is not _UNKNOWN:
        return cast("tuple[str, ...] | None", found)
    made = None
    if dataclasses.is_dataclass(kind):
        made = tuple(f.name for f in dataclasses.fields(kind) if f.compare)
    _remember(_FIELDS, kind, made)
    return made


_FIELDS: dict[type[Any], tuple[str, ...] | None] = {}
_UNKNOWN = object()
_PLAIN_DEPTH = 32
_PLAIN_NODES = 65_536
"""The values past which a setting is not named by its content (a list of a million)."""
_NOT_PLAIN = object()
_NAMED_BY_REPR = frozenset({
    decimal.Decimal, fractions.Fraction, complex, datetime.date, datetime.datetime,
    datetime.time, datetime.timedelta, datetime.timezone, uuid.UUID, pathlib.PurePosixPath,
    pathlib.PureWindowsPath, pathlib.PosixPath, pathlib.WindowsPath,
})  # fmt: skip
"""The standard library's classes whose values cannot change and whose `repr` is their content
(these classes exactly: a subclass's `repr` may not show what it adds)."""
_NAMED = "\x00named"
_RECORD = "\x00record"
_SET = "\x00set"


def cache_key(scope: Mapping[str, Any], request: CompletionRequest, wire: Any) -> str:
    """The key of `request` to the provider of `scope`, whose wire carries the schema `wire`
    (see the module docstring)."""
    return _key(scope, _shown(scope), request, wire)


def _key(scope: Mapping[str, Any], shown: str | None, request: CompletionRequest, wire: Any) -> str:
    """`cache_key`, the scope shown already (`_shown`)."""
    return _own_key(_common(scope, shown, request, wire), request)


def _common(
    scope: Mapping[str, Any], shown: str | None, request: CompletionRequest, wire: Any
) -> hashlib._Hash:
    """A hash fed with the part of the key a client's calls have in common: the format, the
    scope, the request's fields but its messages and source (`_COMMON`) and the wire schema."""
    pieces = [_HEAD, _scope_digest(scope, shown)]
    feed = pieces.append  # (a bound method: no frame of ours per piece)
    for name, tag, encode in _COMMON:
        feed(tag)
        encode(getattr(request, name), feed)
    feed(_SHARED.digest(wire, _json_digest) if wire is not None else _NONE)
    common = hashlib.sha256()
    _hash_part(pieces, common)
    return common


def _own_key(common: hashlib._Hash, request: CompletionRequest) -> str:
    """The key: `common` (`_common`'s, not changed: a copy is fed) with the call's own part,
    its messages and source."""
    pieces = [b"messages"]
    feed = pieces.append
    place = source_place(request)
    # (a source long enough to be remembered is hashed apart, its digest in the text holding
    # it; a shorter one costs less hashed with the text, as a remembered one could not be)
    apart = place if place is not None and len(request.source or "") >= REMEMBERED_FROM else None
    _messages(request.messages, feed, request.source, apart)
    feed(b"source")
    _source(request, place, feed)
    key = common.copy()
    _hash_part(pieces, key)
    return key.hexdigest()


def _hash_part(pieces: list[bytes], into: hashlib._Hash) -> None:
    """Feed `into` a part of the key: the count of its pieces and every piece's length (8 bytes
    each, little-endian), then the pieces."""
    lengths = array.array("Q", [len(pieces), *map(len, pieces)])  # (made from a list: from
    # the iterator took twice as long)
    if _BIG_ENDIAN:
        lengths.byteswap()
    into.update(lengths.tobytes())
    into.update(b"".join(pieces))


# --- the request's fields ---


def _text(value: str | None, feed: Feed) -> None:
    # (`str.encode`: a subclass's own `encode` is not asked what its text is)
    feed(_NONE if value is None else b"\x01" + str.encode(value, "utf-8", "surrogatepass"))


_DOCUMENT_END = "\n</document>"
"""What closes the source document in the prompt's turn (`sdk.engine.conversation`)."""


def source_place(request: CompletionRequest) -> tuple[int, int, int] | None:
    """Where the request's messages already hold its source document, whole: the message, the
    part (-1: the message's text) and the character the source starts at; `None` when they do
    not (whole `messages` beside a `source`). Only the places the prompt's turn puts it are
    looked at (a text that ends with the source, or with the source and `</document>`), so
    finding it costs two comparisons, never a search. Only a `str` itself, source or text, is
    looked into: a subclass's own methods (a case-blind `endswith`, a `len` counting bytes)
    may say it holds what it does not, and the key would then leave out the text it missed
    (such a source is hashed whole, as are the messages)."""
    source = request.source
    if not source or type(source) is not str:
        return None
    for index, message in enumerate(request.messages):
        content = message.content
        texts = [(-1, content)] if isinstance(content, str) else [
            (number, part.text) for number, part in enumerate(content) if isinstance(part, Text)
        ]  # fmt: skip
        for number, text in texts:
            if type(text) is not str:
                continue
            end = len(text) - len(_DOCUMENT_END) if text.endswith(_DOCUMENT_END) else len(text)
            if text.endswith(source, 0, end):
                return index, number, end - len(source)
    return None


def _source(request: CompletionRequest, place: tuple[int, int, int] | None, feed: Feed) -> None:
    """The source document: where the messages (hashed before it) hold it, when they do
    (`place`, `source_place`'s), so a long document is hashed once (the place and the length
    name it exactly: the same messages with another source hold it elsewhere or not at all);
    else its text."""
    if place is None:
        _text(request.source, feed)
    else:
        assert request.source is not None
        feed(b"@%d,%d,%d,%d" % (*place, len(request.source)))


def _holding(text: str, start: int, source: str | None, feed: Feed) -> None:
    """A text that holds `source` from `start` (`source_place` found it there): what is before
    it, the source's digest, what is after it (each its own piece: the lengths before them all
    keep them apart)."""
    assert source is not None
    feed(b"\x02" + text[:start].encode("utf-8", "surrogatepass"))
    feed(_source_digest(source))
    feed(text[start + len(source) :].encode("utf-8", "surrogatepass"))


def _source_digest(source: str) -> bytes:
    """The sha256 of a source document, remembered by its object (`_document_digest`): the same
    document asked of again (another contract, a cache hit) is not hashed again (hashing it
    was most of what a hit on a long document cost: bench row 18 measures such hits)."""
    return _document_digest(source, _text_digest)


def _text_digest(text: str) -> bytes:
    return hashlib.sha256(str.encode(text, "utf-8", "surrogatepass")).digest()


def _data_digest(data: bytes) -> bytes:
    """The sha256 of an image's or a PDF's bytes, remembered as a source document's is (bench
    row 18 measures a hit with a 5 MB PDF)."""
    return _document_digest(data, _sha256)


def _sha256(data: bytes) -> bytes:
    return hashlib.sha256(data).digest()


REMEMBERED_FROM: Final = 4096
"""The fewest characters (of a text) or bytes (of an image or a PDF) of a document whose digest
is remembered (`_DOCUMENTS`): remembering a new one (a lock, an entry made and an old one let
go) costs about what hashing 2 to 4 KiB does, and more than that in a call, so a shorter
document, hashed again when it is asked of again, is cheaper hashed each time (a run over many
short documents asks of each once)."""


def _document_digest(document: T, compute: Callable[[T], bytes]) -> bytes:
    """`compute(document)`, remembered for the last few `str` and `bytes` objects
    (`_DOCUMENTS`) of at least `REMEMBERED_FROM` characters or bytes. By the object, not by its
    content: content equal to a document remembered would be hashed (Python's own hash) to be
    found, which costs a third of hashing it anew. An instance of a subclass, whose length and
    hash are its own to say, is hashed each time."""
    exact = type(document) is str or type(document) is bytes
    if exact and len(cast("str | bytes", document)) >= REMEMBERED_FROM:
        return _DOCUMENTS.digest(document, compute)
    return compute(document)


def _plain(value: Any, feed: Feed) -> None:
    """A small value: a flag, a whole number or a word by a tag and its text (the usual cases,
    without building a JSON encoder), anything else (options, extra fields) as canonical
    JSON."""
    kind = type(value)
    if value is None or value is False or value is True:
        feed(_FLAGS[value])
    elif kind is int:
        feed(b"i%d" % value)
    elif kind is str:
        feed(b"s" + value.encode("utf-8", "surrogatepass"))
    elif not value and (kind is dict or isinstance(value, Mapping)):
        feed(b"{}")
    else:
        feed(b"j" + _JSON.encode(value).encode("utf-8", "surrogatepass"))


def _sampling(options: Sampling, feed: Feed) -> None:
    """The sampling options set, by name (every field of `Sampling`, as `items()` gives them);
    none set (most calls) is the empty mapping's piece, `_plain({})`'s, fed at once. The SDK's
    own options are sent as JSON and keyed as JSON; with a provider's own options (`own`),
    passed to it as given, not as JSON, all are keyed as typed text (`_own_options`)."""
    if options is NO_SAMPLING:
        feed(b"{}")
    elif not options.own:
        _plain(dict(options.items()), feed)
    else:
        feed(_own_options(options))


def _own_options(options: Sampling) -> bytes:
    """Options with a provider's own among them as one piece: each name and value's typed
    text (`plain_text`: `{1: x}` is not `{"1": x}`, a tuple not a list), each after its
    length; a value that is not plain data (an object of the caller's, whose `repr` may be the
    same for another value) by a name of its own per object (`token_of`: the same object the
    same key in this process, another object another key: a miss, never another value's
    answer)."""
    pieces = [b"o"]
    for name, value in options.items():
        text = plain_text(value)
        shown = text if text is not None else f"unnamed-{token_of(value)}"
        for part in (name, shown):
            encoded = part.encode("utf-8", "surrogatepass")
            pieces.append(b"%d:%s" % (len(encoded), encoded))
    return b"".join(pieces)


def _extra_body(body: Mapping[str, Any], feed: Feed) -> None:
    """A request's `extra_body`: as `_plain` feeds a mapping (empty: its piece at once), by
    `_BODY_JSON`, which never falls back to a value's `repr`."""
    if not body:
        feed(b"{}")
    else:
        feed(b"j" + _BODY_JSON.encode(body).encode("utf-8", "surrogatepass"))


def _output(output: Output, feed: Feed) -> None:
    """What is asked for: a contract's fingerprint, a grammar's, the tools offered (with the
    choice and whether calls may be parallel), or free text, each under its own tag."""
    if type(output) is JsonDocument:  # (the usual case, before the match's pattern checks)
        feed(b"json:" + schema_info(output.contract).fingerprint.encode())
        return
    match output:
        case JsonDocument(contract):
            feed(b"json:" + schema_info(contract).fingerprint.encode())
        case GrammarSentence(grammar):
            feed(b"grammar:" + _SHARED.digest(grammar, _grammar_digest))
        case ToolOffer(tools, choice, parallel):
            feed(b"tools")
            _tools(tools, feed)
            _choice(choice, feed)
            _plain(parallel, feed)
        case FreeText():
            feed(b"text")
        case unknown:
            assert_never(unknown)


def _grammar_digest(grammar: Any) -> bytes:
    """A grammar's fingerprint (its name, version and text) and its description, which goes
    with it to OpenAI (the custom tool's) and tells the model what to write."""
    description = (grammar.description or "").encode("utf-8", "surrogatepass")
    return hashlib.sha256(grammar.fingerprint().encode() + b"\x00" + description).digest()


def _messages(
    messages: tuple[Message, ...],
    feed: Feed,
    source: str | None = None,
    place: tuple[int, int, int] | None = None,
) -> None:
    """The messages, each text whole but the one that holds the `source` at `place`
    (`source_place`'s, given for a source long enough to be remembered): that one in three
    pieces, the text before the source, the source's digest (`_source_digest`, remembered: a
    document asked again is not hashed again) and the text after it, under a tag of their
    own."""
    feed(b"%d" % len(messages))
    for index, message in enumerate(messages):
        feed(message.role.encode())
        content = message.content
        if isinstance(content, str):
            if place is not None and place[:2] == (index, -1):
                _holding(content, place[2], source, feed)
            else:
                _text(content, feed)
        else:
            feed(b"parts:%d" % len(content))
            for number, part in enumerate(content):
                if place is not None and place[:2] == (index, number):
                    assert isinstance(part, Text)
                    _holding(part.text, place[2], source, feed)
                else:
                    _part(part, feed)
        feed(b"calls:%d" % len(message.tool_calls))
        for call in message.tool_calls:
            for text in (call.id, call.tool, call.text):
                _text(text, feed)
        feed(b"results:%d" % len(message.tool_results))
        for result in message.tool_results:
            _plain([result.call_id, result.content, result.is_error, result.tool], feed)


def _part(part: Any, feed: Feed) -> None:
    """A text, or an image or a PDF: its kind, what names its type, its bytes' sha256 or URL."""
    if isinstance(part, Text):
        _text(part.text, feed)
        return
    # (by the class it is, not its name: a subclass of `Image` has no `name`, and one of
    # either keys as its class does, the same request)
    kind = "Image" if isinstance(part, Image) else "PDF"
    feed(kind.encode())
    _text(part.media_type if kind == "Image" else part.name, feed)
    _text(part.url, feed)
    feed(_NONE if part.data is None else _data_digest(part.data))


def _tools(tools: tuple[Tool, ...], feed: Feed) -> None:
    feed(b"%d" % len(tools))
    for tool in tools:
        _tool(tool, feed)


def _tool(tool: Tool, feed: Feed) -> None:
    _text(tool.name, feed)
    _text(tool.description, feed)
    feed(schema_info(tool.arguments).fingerprint.encode())


def _choice(choice: Any, feed: Feed) -> None:
    if isinstance(choice, Tool):
        feed(b"tool")
        _tool(choice, feed)
    else:
        _plain(choice, feed)


INGREDIENTS: dict[str, Callable[[Any, Feed], None]] = {
    "output": _output,
    "messages": _messages,
    "max_tokens": _plain,
    "system": _text,
    "options": _sampling,
    "extra_body": _extra_body,
    "reasoning": _plain,
    "source": _text,  # or its place in the messages, when they hold it (`_source`)
    # A schema the target would weaken is refused unless accepted: a stored answer to an
    # accepting request must not answer one that would be refused.
    "accept_weakened": _plain,
}
"""How each field of `CompletionRequest` goes into the key (every field has one)."""
_OWN = ("messages", "source")
"""The fields that are a call's own part of the key (`_own_key`: hashed together, the source
where the messages hold it)."""
_COMMON = [
    (name, name.encode(), encode) for name, encode in INGREDIENTS.items() if name not in _OWN
]


# --- what is hashed once ---


def _json_digest(value: Any) -> bytes:
    return hashlib.sha256(_JSON.encode(value).encode("utf-8", "surrogatepass")).digest()


_last_scope: tuple[str, bytes] = ("", b"")


def _scope_digest(scope: Mapping[str, Any], shown: str | None) -> bytes:
    """The scope's canonical JSON hashed; the last one is remembered (a client's calls share
    their provider's scope, made again for each call: known by its `repr`, not encoded again).
    By its `repr`, not by `==`: `True`, `1` and `1.0` are equal, but not on the wire; and only
    for a scope of plain data (`shown`: `_shown(scope)`)."""
    global _last_scope
    last, digest = _last_scope
    if shown is None or shown != last or not digest:
        digest = _json_digest(scope)
        _last_scope = (shown or "", digest)
    return digest


_PLAIN = frozenset({str, int, float, bool, type(None)})


def _shown(scope: Mapping[str, Any]) -> str | None:
    """The scope's `repr`, where it says all the scope holds: a scope made, all the way down,
    of dicts, lists and tuples of `str`, `int`, `float`, `bool` and `None` themselves. `None`
    for any other value (a `str` subclass, an object of the caller's): its `repr` is its own
    to say, and may be the same for another content (a provider copies some settings into its
    scope as the caller gave them: a query parameter, a region)."""
    return repr(scope) if _plain_data(scope) else None


def _plain_data(value: Any) -> bool:
    kind = type(value)
    if kind in _PLAIN:
        return True
    if kind is dict:
        return all(type(key) is str and _plain_data(item) for key, item in value.items())
    if kind is list or kind is tuple:
        return all(_plain_data(item) for item in value)
    return False


class _Remembered:
    """`compute(value)`, once per object, for at most `most` objects whose sizes (`len`, where
    a `most_size` is given) add up to at most `most_size` (the oldest go first; one larger
    alone is not remembered): for values that never change (a dialect's schema of a contract, a
    grammar, a source document's text, an image's bytes). Each object is held with its digest,
    so its id is never another object's while remembered."""

    def __init__(self, most: int, most_size: int | None = None) -> None:
        self._most = most
        self._most_size = most_size
        self._held: dict[int, tuple[object, bytes, int]] = {}
        self._size = 0
        self._lock = _fork.lock()

    def digest(self, value: Any, compute: Callable[[Any], bytes]) -> bytes:
        found = self._held.get(id(value))
        if found is not None and found[0] is value:
            return found[1]
        digest = compute(value)
        size = len(value) if self._most_size is not None else 0
        if self._most_size is not None and size > self._most_size:
            return digest  # (it would push every other one out, then itself)
        with self._lock:
            before = self._held.pop(id(value), None)  # (the same object, made by two threads)
            self._size += size - (before[2] if before is not None else 0)
            self._held[id(value)] = (value, digest, size)
            while len(self._held) > self._most or (
                self._most_size is not None and self._size > self._most_size
            ):
                self._size -= self._held.pop(next(iter(self._held)))[2]
        return digest


_SHARED = _Remembered(512)
"""The shared, read-only values the SDK caches itself (a dialect's schema, a grammar)."""
_DOCUMENTS = _Remembered(16, most_size=64 * 2**20)
"""The last few documents calls carried (source texts, image and PDF bytes), 64 Mi characters
and bytes at most: each is held while remembered, so few."""


# --- the key of a request made again ---


_Turns: TypeAlias = tuple[tuple[Message, ...], str | None, str]
"""A request's messages and source, and its key."""


class LastKey:
    """The key of the last request it gave one for, given again for the same request without
    hashing it again, and the part of it a client's calls have in common, for a request like
    that one but for its messages and source (a run over many documents), which hashes its own
    part alone (`_own_key`). A client's call made again, whose spec and first messages are kept
    (`sdk.engine.options.LastCall`), asks for a request made of the same objects. Like: its
    provider's scope shown the same (`_shown`: its `repr`, for plain data alone), the same
    wire schema object, the same contract or grammar, and every other common field the same
    object (`_COMMON_FIELDS`), none of them a value that can change in place (`_common_kept`:
    no `extra_body`, sampling options of plain values, a system prompt within `KEPT_TEXT`);
    the same: the messages and source the same objects too, which are held for it only where
    they cannot change and are within what a client keeps of its last call (`_turns_kept`:
    text and unchanging parts, `sdk._values.kept`). Replaced whole, so a thread reads one
    request's or another's; pickled or copied, it starts with nothing kept."""

    __slots__ = ("_last",)

    def __init__(self) -> None:
        # (scope shown, wire, contract or grammar, the other common fields, the common part's
        # hash, and the messages, source and key where these are kept)
        self._last: (
            tuple[str, Any, object, tuple[Any, ...], hashlib._Hash, _Turns | None] | None
        ) = None

    def __reduce__(self) -> tuple[type[LastKey], tuple[()]]:
        return LastKey, ()

    def __deepcopy__(self, memo: dict[int, object]) -> LastKey:
        return LastKey()

    def key(self, scope: Mapping[str, Any], request: CompletionRequest, wire: Any) -> str:
        """`cache_key(scope, request, wire)`."""
        shown: str | None = _shown(scope)
        asked = _asked(request.output)
        if shown is None or asked is None or not _common_kept(request):
            # (a scope `repr` cannot tell from another, tools or free text asked for, or a
            # value that can change in place: its key made each call, nothing kept)
            return _key(scope, shown, request, wire)
        fields = _COMMON_FIELDS(request)
        last = self._last
        if (
            last is not None
            and last[1] is wire
            and last[2] is asked
            and last[0] == shown
            and all(map(operator.is_, fields, last[3]))
        ):
            turns = last[5]
            if turns is not None and request.messages is turns[0] and request.source is turns[1]:
                return turns[2]
            common = last[4]
        else:
            common = _common(scope, shown, request, wire)  # (the scope shown once)
        key = _own_key(common, request)
        kept = (request.messages, request.source, key) if _turns_kept(request) else None
        self._last = (shown, wire, asked, fields, common, kept)
        return key


def _asked(output: Output) -> object:
    """What a request asks for, where a like request is the same object: a contract (class)
    or a grammar; `None` for tools or free text (a new offer each call)."""
    if type(output) is JsonDocument:
        return output.contract
    if type(output) is GrammarSentence:
        return output.grammar
    return None


_COMMON_FIELDS = operator.attrgetter(
    *(name for name in INGREDIENTS if name not in ("output", *_OWN))
)
"""The request's common fields but what it asks for (`_asked`), as a tuple."""


def _common_kept(request: CompletionRequest) -> bool:
    """Whether `request`'s common fields may be held to give their part of the key again:
    nothing in them can change in place (so the same objects are the same value: no
    `extra_body`, a mapping; sampling options of plain values or tuples of them, where a
    provider's own option may be a caller's list and a `Sampling` made by hand may hold a list
    in `stop`), and its system prompt is within what a client keeps (`KEPT_TEXT`)."""
    if request.extra_body or (request.system is not None and len(request.system) > KEPT_TEXT):
        return False
    options = request.options
    return options is NO_SAMPLING or all(_plain_value(value) for _, value in options.items())


def _plain_value(value: object) -> bool:
    return type(value) in _PLAIN or (
        type(value) is tuple and all(type(item) in _PLAIN for item in value)
    )


def _turns_kept(request: CompletionRequest) -> bool:
    """Whether `request`'s messages and source may be held to give its key again: a tuple of
    turns (frozen) of text (a `str` itself) or of parts that cannot change, no tool calls or
    results, within what a client keeps of its last call (`sdk._values.kept`)."""
    if type(request.messages) is not tuple:
        return False
    kept = Kept()
    for message in request.messages:
        if message.tool_calls or message.tool_results or not kept.add(message.content):
            return False
    return kept.add(request.source) and kept.fits
