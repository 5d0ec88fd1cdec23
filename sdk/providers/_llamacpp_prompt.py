"""llama.cpp's native prompt: the chat template learned once, message content always text.

`/completion` takes a prompt string and tokenizes it with special-token parsing on, so a document
holding `<|im_end|>` would become the real end-of-turn token. It also takes a prompt as a mix of
strings and token ids, and `/tokenize` can tokenize with special parsing off. So, per provider:

1. The template's shape, once per conversation shape (system prompt or not, the roles in order):
   `/apply-template` renders placeholder messages, and the rendering is split into the template's
   own text (its control tokens included) and the slots where each content goes (noting whether
   the template trims it).
2. The model's special-token texts, once: `GET /v1/models` (the vocabulary's size), `/tokenize`
   of every id with its piece, then `/tokenize` of all the pieces with special parsing on and
   off: the tokens that only the special parsing produces are the ones a text must not contain.
3. Each call: the prompt is assembled locally. Content holding none of those texts goes inside
   the prompt string, where the server tokenizes it exactly as plain text: one request per call.
   Content holding one goes as the token ids of `/tokenize` with `parse_special: false` (one
   more request, for that call only): it stays text.

While the special texts are being learned (by the first call; concurrent first calls do not wait
for it), or when the server does not give its vocabulary's size, a call tokenizes all its
content that way: safe, one request more. A template that does not place content as it
is (or trimmed) cannot be learned: the call fails with a `ProviderError` saying to pass
`prompt_template=`. The codec keeps what it learned; it does no I/O itself.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from collections.abc import Mapping
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from sdk import _fork
from sdk.providers._base import CompletionRequest
from sdk.providers._base import Exchange
from sdk.providers._control_tokens import ControlTokenPolicy
from sdk.providers._control_tokens import ControlTokens
from sdk.providers._control_tokens import check_request
from sdk.providers._control_tokens import contents
from sdk.providers._errors import provider_error

__all__ = [
    "NativePrompts",
    "Prompt",
    "ServerTemplate",
    "ShapeKey",
    "TemplateShape",
    "assemble",
    "read_shape",
    "sentinel_messages",
    "shape_key",
    "special_texts",
]

Prompt = str | list[str | int]
"""A `/completion` prompt: a string, or strings and token ids (at least one id)."""

ShapeKey = tuple[bool, tuple[str, ...]]
"""A conversation's shape: whether it has a system prompt, and its roles in order."""

MAX_SHAPES = 64
"""Conversation shapes remembered per provider (the oldest is forgotten first)."""
CLAIM_SECONDS = 60.0
"""How long the call learning the special texts has before another call may try."""

LEARN_VOCABULARY_LIMIT = 200_000
"""The largest vocabulary whose special-token texts are learned. Above it (Gemma 3: 262,144
tokens, 6,250 of them special) the server takes minutes to an hour to tokenize every piece
(measured on one thread: 54 s in 64 chunks, and a single request of all 2.5 MB of pieces did not
end in 15 minutes), so nothing is learned and each call checks its own content instead (two small
`/tokenize` requests more per call, as while learning: with pieces, then without parsing
special tokens)."""
_MARK = "sdkslot{}q7zk"
_PAD = "\n  "
_PAD_AFTER = "  \n"


def shape_key(request: CompletionRequest) -> ShapeKey:
    """The request's conversation shape."""
    return bool(request.system), tuple(message.role for message in request.messages)


def request_contents(request: CompletionRequest) -> list[str]:
    """The request's contents in conversation order: the system prompt (if any), the messages."""
    system = [request.system] if request.system else []
    return system + [message.text for message in request.messages]


def sentinel_messages(key: ShapeKey) -> list[dict[str, str]]:
    """Chat messages of the shape `key` whose contents are placeholders (padded with whitespace,
    so that a template that trims content shows it)."""
    has_system, roles = key
    all_roles = (("system",) if has_system else ()) + roles
    return [
        {"role": role, "content": _PAD + _MARK.format(index) + _PAD_AFTER}
        for index, role in enumerate(all_roles)
    ]


@dataclass(frozen=True)
class TemplateShape:
    """A rendering split at its content slots: `parts[0]`, slot 0, `parts[1]`, ... `parts[-1]`.

    `order[i]` is which content (conversation order) goes in slot i; `lstrip`/`rstrip[i]` whether
    the template trims that slot's leading or trailing whitespace.
    """

    parts: tuple[str, ...]
    order: tuple[int, ...]
    lstrip: tuple[bool, ...]
    rstrip: tuple[bool, ...]

    def place(self, contents: Sequence[str]) -> list[str]:
        """The contents in slot order, trimmed where the template trims."""
        placed = []
        for slot, index in enumerate(self.order):
            text = contents[index]
            if self.lstrip[slot]:
                text = text.lstrip()
            if self.rstrip[slot]:
                text = text.rstrip()
            placed.append(text)
        return placed


def read_shape(body: Any, count: int) -> TemplateShape:
    """The shape of an `/apply-template` reply to `sentinel_messages` with `count` contents.

    A template that drops, repeats or rewrites a placeholder cannot be learned: `ProviderError`
    (not retried: the template will do the same again)."""
    rendered = body.get("prompt") if isinstance(body, dict) else None
    if not isinstance(rendered, str):
        raise provider_error("llamacpp", "/apply-template returned no prompt", status_code=200)
    slots: list[tuple[int, int, int, bool, bool]] = []  # start, end, content index, trims
    for index in range(count):
        mark = _MARK.format(index)
        if rendered.count(mark) != 1:
            raise _unlearnable(f"placeholder {index} appears {rendered.count(mark)} times")
        start = rendered.index(mark)
        end = start + len(mark)
        lstrip = not rendered[:start].endswith(_PAD)
        rstrip = not rendered[end:].startswith(_PAD_AFTER)
        start -= 0 if lstrip else len(_PAD)
        end += 0 if rstrip else len(_PAD_AFTER)
        slots.append((start, end, index, lstrip, rstrip))
    slots.sort()
    parts, position = [], 0
    for start, end, *_ in slots:
        if start < position:
            raise _unlearnable("placeholders overlap")
        parts.append(rendered[position:start])
        position = end
    parts.append(rendered[position:])
    if any(_MARK.format("") in part or "sdkslot" in part for part in parts):
        raise _unlearnable("a placeholder was rewritten")
    return TemplateShape(
        tuple(parts),
        tuple(slot[2] for slot in slots),
        tuple(slot[3] for slot in slots),
        tuple(slot[4] for slot in slots),
    )


def _unlearnable(why: str) -> Exception:
    error = provider_error(
        "llamacpp",
        "the model's chat template does not place message content as it is (" + why + "), so "
        "the prompt cannot be built with the content kept as text: pass prompt_template=",
        status_code=200,
        transient=False,
    )
    return error


def assemble(shape: TemplateShape, placed: Sequence[str | list[int]]) -> Prompt:
    """The prompt: template text and contents in slot order; a string when every content is
    text, else strings and token ids (starting with a string, so the server still adds the BOS
    it adds to a string prompt; merged, so the server reads it as one prompt)."""
    pieces: list[str | list[int]] = [shape.parts[0]]
    for part, content in zip(shape.parts[1:], placed, strict=True):
        pieces += [content, part]
    if all(isinstance(piece, str) for piece in pieces):
        return "".join(piece for piece in pieces if isinstance(piece, str))
    prompt: list[str | int] = [""]
    for piece in pieces:
        if isinstance(piece, str):
            last = prompt[-1]
            if isinstance(last, str):
                prompt[-1] = last + piece
            else:
                prompt.append(piece)
        else:
            prompt.extend(piece)
    if not any(isinstance(item, int) for item in prompt):
        # Every tokenized content was empty: an all-string array would be read as a batch.
        return "".join(item for item in prompt if isinstance(item, str))
    return prompt


def special_texts(pieces: Mapping[int, str], parsed: Any, plain: Any) -> ControlTokens:
    """The special-token texts: pieces of the tokens that `/tokenize` of all pieces produced with
    special parsing (`parsed`) and not without it (`plain`)."""
    only_special = set(_token_ids(parsed)) - set(_token_ids(plain))
    return ControlTokens(pieces[token] for token in only_special if token in pieces)


def _token_ids(body: Any) -> list[int]:
    tokens = body.get("tokens") if isinstance(body, dict) else None
    if not isinstance(tokens, list):
        raise ValueError("/tokenize returned no token list")
    ids: list[int] = []
    for token in tokens:
        token = token.get("id") if isinstance(token, dict) else token
        if not isinstance(token, int) or isinstance(token, bool):
            raise ValueError(f"/tokenize returned a token that is not an id: {token!r}")
        ids.append(token)
    return ids


def _pieces(body: Any) -> dict[int, str]:
    tokens = body.get("tokens") if isinstance(body, dict) else None
    if not isinstance(tokens, list):
        raise ValueError("/tokenize returned no token list")
    pieces: dict[int, str] = {}
    for token in tokens:
        if not isinstance(token, dict):
            raise ValueError("/tokenize with_pieces returned a token without its piece")
        token_id, piece = token.get("id"), token.get("piece")
        # A piece that is not valid UTF-8 comes as a list of bytes: no special token is that.
        if isinstance(token_id, int) and isinstance(piece, str) and piece:
            pieces[token_id] = piece
    return pieces


def _vocabulary_size(body: Any) -> int:
    models = body.get("data") if isinstance(body, dict) else None
    meta = models[0].get("meta") if isinstance(models, list) and models else None
    size = meta.get("n_vocab") if isinstance(meta, dict) else None
    if not isinstance(size, int) or not 0 < size <= 4_000_000:
        raise ValueError("/v1/models gives no vocabulary size (meta.n_vocab)")
    return size


@dataclass(frozen=True)
class ServerTemplate:
    """What a provider learned of its server (`LlamaCppProvider.learned`), as a value: another
    provider of the same server and model starts from it (`learned=`), and `sdk.wire` builds
    native-route requests with it, apart from the server.

    `shapes`: the template's shape for each conversation shape seen; `specials`: the model's
    special-token texts (`None`: not learned, yet or ever: see the two below)."""

    shapes: tuple[tuple[ShapeKey, TemplateShape], ...] = ()
    specials: frozenset[str] | None = None
    no_vocabulary: bool = False
    """The server gives no vocabulary size: the special texts are never learned, and every
    content goes as token ids."""
    vocabulary_too_large: bool = False
    """The vocabulary is over `LEARN_VOCABULARY_LIMIT` (Gemma 3's 262,144 tokens): learning the
    special texts was skipped and never will be (the server would take minutes to an hour), and
    each call checks its own content instead (one `/tokenize` of it more)."""


class NativePrompts:
    """What one provider learned of its server's template and vocabulary, and the exchanges
    that build each call's prompt from it (see the module docstring)."""

    def __init__(self, learned: ServerTemplate | None = None) -> None:
        learned = learned or ServerTemplate()
        self._shapes: dict[ShapeKey, TemplateShape] = dict(learned.shapes)
        self._special_texts = learned.specials
        self._specials: ControlTokens | None = (
            ControlTokens(learned.specials) if learned.specials is not None else None
        )
        self._claimed: float | None = None
        # The server gives no vocabulary size: never learn.
        self._no_vocabulary = learned.no_vocabulary
        # The vocabulary is over LEARN_VOCABULARY_LIMIT: never learn, check each call.
        self._too_large = learned.vocabulary_too_large
        self._lock = _fork.lock()

    def learned(self) -> ServerTemplate:
        """What has been learned so far, as a value."""
        with self._lock:
            shapes = tuple(self._shapes.items())
        return ServerTemplate(
            shapes=shapes,
            specials=self._special_texts,
            no_vocabulary=self._no_vocabulary,
            vocabulary_too_large=self._too_large,
        )

    @property
    def specials(self) -> ControlTokens | None:
        """The model's special-token texts, once learned."""
        return self._specials

    def exchange(
        self, request: CompletionRequest, finish: Callable[[Prompt], Exchange]
    ) -> Exchange:
        """The exchanges of one call: what is left to learn, any content to tokenize, then
        `finish(prompt)` (the `/completion` exchange)."""
        key = shape_key(request)
        shape = self._shapes.get(key)
        if shape is None:
            count = len(key[1]) + key[0]

            def learned(body: Any) -> Exchange:
                self._remember(key, read_shape(body, count))
                return self.exchange(request, finish)

            return Exchange("/apply-template", {"messages": sentinel_messages(key)}, then=learned)
        if self._specials is None and self._learns() and self._claim():
            return self._learn_specials(lambda: self.exchange(request, finish))
        placed = shape.place(request_contents(request))
        specials = self._specials
        if specials is None:
            hostile = list(range(len(placed)))  # not known yet: every content as token ids
        else:
            hostile = [slot for slot, text in enumerate(placed) if specials.find(text)]
        if not hostile:
            return finish(assemble(shape, placed))
        return self._tokenized(shape, list(placed), hostile, finish)

    def checked(
        self, request: CompletionRequest, policy: ControlTokenPolicy, send: Callable[[], Exchange]
    ) -> Exchange:
        """The routes where the server tokenizes the content (OpenAI route, `prompt_template=`):
        under `"reject"`, check the content for the model's own special-token texts before
        `send()` (the families' strings are checked by the codec first). Learned once; a call
        that starts while another is learning checks its own content: `/tokenize` of it with
        and without special parsing. `ControlTokenInContent` passes the fault boundary as it
        is; the content has not been sent."""
        if policy == "allow" or self._no_vocabulary:
            return send()
        if self._specials is not None:
            check_request(request, self._specials, policy=policy, server="llamacpp")
            return send()
        if self._learns() and self._claim():
            return self._learn_specials(lambda: self.checked(request, policy, send))
        joined = "\n".join(text for _, text in contents(request))

        def parsed(parsed_body: Any) -> Exchange:
            def plain(plain_body: Any) -> Exchange:
                own = special_texts(_pieces(parsed_body), parsed_body, plain_body)
                check_request(request, own, policy=policy, server="llamacpp")
                return send()

            body = {"content": joined, "parse_special": False, "add_special": False}
            return Exchange("/tokenize", body, then=plain)

        body = {"content": joined, "with_pieces": True, "add_special": False}
        return Exchange("/tokenize", body, then=parsed)

    def _tokenized(
        self,
        shape: TemplateShape,
        placed: list[str | list[int]],
        slots: list[int],
        finish: Callable[[Prompt], Exchange],
    ) -> Exchange:
        slot, rest = slots[0], slots[1:]
        text = placed[slot]

        def tokenized(body: Any) -> Exchange:
            placed[slot] = _token_ids(body)
            if rest:
                return self._tokenized(shape, placed, rest, finish)
            return finish(assemble(shape, placed))

        body = {"content": text, "parse_special": False, "add_special": False}
        return Exchange("/tokenize", body, then=tokenized)

    def _remember(self, key: ShapeKey, shape: TemplateShape) -> None:
        with self._lock:
            self._shapes[key] = shape
            while len(self._shapes) > MAX_SHAPES:
                del self._shapes[next(iter(self._shapes))]

    def _learns(self) -> bool:
        """Whether the special texts can still be learned (the server gives a vocabulary size,
        and not one over `LEARN_VOCABULARY_LIMIT`)."""
        return not (self._no_vocabulary or self._too_large)

    def _claim(self) -> bool:
        """Whether this call learns the special texts (no other call is at it)."""
        now = time.monotonic()
        with self._lock:
            if self._claimed is not None and now - self._claimed < CLAIM_SECONDS:
                return False
            self._claimed = now
            return True

    def _learn_specials(self, then: Callable[[], Exchange]) -> Exchange:
        def sized(body: Any) -> Exchange:
            try:
                size = _vocabulary_size(body)
            except ValueError:
                # An older server: every call then sends all its content as token ids.
                self._no_vocabulary = True
                return then()
            if size > LEARN_VOCABULARY_LIMIT:
                self._too_large = True
                return then()
            every_id = list(range(size))
            return Exchange("/tokenize", {"content": every_id, "with_pieces": True}, then=pieces)

        def pieces(body: Any) -> Exchange:
            texts = _pieces(body)
            joined = "\n".join(texts.values())

            def parsed(parsed_body: Any) -> Exchange:
                def plain(plain_body: Any) -> Exchange:
                    specials = special_texts(texts, parsed_body, plain_body)
                    self._special_texts, self._specials = specials.strings, specials
                    return then()

                body = {"content": joined, "parse_special": False, "add_special": False}
                return Exchange("/tokenize", body, then=plain)

            body = {"content": joined, "parse_special": True, "add_special": False}
            return Exchange("/tokenize", body, then=parsed)

        return Exchange("/v1/models", {}, method="GET", then=sized)
