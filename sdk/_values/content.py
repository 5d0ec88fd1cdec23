"""Message content as parts: text, images and PDF documents (value types, no I/O but `from_path`).

    messages=[{"role": "user", "content": ["What does this invoice total?", PDF.from_path(p)]}]

A part is given as bytes with its media type, or as a URL the provider fetches itself. Each
provider translates parts to its own blocks (Anthropic image and document blocks, OpenAI input
image and file, Chat image URL and file parts); a provider that cannot take a part raises
`UnsupportedRequest` when the request is built, before anything is sent.

`source=` stays the text that `SourceQuote`s are checked against: with a PDF, pass the text you
want quotes verified against (the SDK does not read PDFs).
"""

from __future__ import annotations

import base64
import mimetypes
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Final
from typing import TypeAlias

__all__ = ["PDF", "Content", "Image", "Part", "Text", "content_text", "parts_of"]

_IMAGE_TYPES = frozenset({"image/png", "image/jpeg", "image/gif", "image/webp"})


@dataclass(frozen=True, slots=True)
class Text:
    """A piece of text in a message."""

    text: str

    def __post_init__(self) -> None:
        if not isinstance(self.text, str):  # (else a call fails deep inside: the cache's key,
            # a provider's encoding, the check for lone surrogates, with a raw error)
            raise TypeError(f"Text takes a str, not {type(self.text).__name__}")


# How a part's bytes are written in JSON, and read from it (a prompt's variables in a batch line
# or an eval dataset, `Prompt.from_json`; `model_dump(mode="json")`): base64, as every API
# carries them. Pydantic's default, UTF-8, failed on an image's bytes when writing and read the
# base64 text of a line as the bytes themselves, sent as a broken image.
_AS_JSON: Final = {"ser_json_bytes": "base64", "val_json_bytes": "base64"}


@dataclass(frozen=True, slots=True)
class Image:
    """An image: `data` bytes with their `media_type` (png, jpeg, gif, webp), or a `url`."""

    data: bytes | None = None
    media_type: str | None = None
    url: str | None = None

    __pydantic_config__ = _AS_JSON

    def __post_init__(self) -> None:
        _texts(self, "Image", media_type=self.media_type, url=self.url)
        _one_source(self.data, self.url, "Image")
        if self.data is not None and self.media_type not in _IMAGE_TYPES:
            raise ValueError(
                f"Image media_type must be one of {', '.join(sorted(_IMAGE_TYPES))}, "
                f"not {self.media_type!r}"
            )

    @classmethod
    def from_path(cls, path: str | os.PathLike[str]) -> Image:
        """The image file at `path` (its media type from the file name)."""
        media_type = mimetypes.guess_type(str(path))[0]
        return cls(data=Path(path).read_bytes(), media_type=media_type)

    def data_url(self) -> str:
        """The image as a `data:` URL (or its URL)."""
        return self.url or _data_url(self.media_type or "", self.data or b"")

    def base64(self) -> str:
        """The bytes, base64-encoded."""
        return base64.b64encode(self.data or b"").decode("ascii")


@dataclass(frozen=True, slots=True)
class PDF:
    """A PDF document: `data` bytes (with an optional file `name`), or a `url`."""

    data: bytes | None = None
    url: str | None = None
    name: str = "document.pdf"

    media_type = "application/pdf"
    __pydantic_config__ = _AS_JSON

    def __post_init__(self) -> None:
        _texts(self, "PDF", url=self.url)
        if not isinstance(self.name, str):
            raise TypeError(f"PDF name must be a str, not {type(self.name).__name__}")
        _one_source(self.data, self.url, "PDF")
        if self.data is not None and not self.data.startswith(b"%PDF"):
            raise ValueError("PDF data does not start with %PDF: not a PDF document")

    @classmethod
    def from_path(cls, path: str | os.PathLike[str]) -> PDF:
        """The PDF file at `path`."""
        return cls(data=Path(path).read_bytes(), name=Path(path).name)

    def data_url(self) -> str:
        """The document as a `data:` URL (or its URL)."""
        return self.url or _data_url(self.media_type, self.data or b"")

    def base64(self) -> str:
        """The bytes, base64-encoded."""
        return base64.b64encode(self.data or b"").decode("ascii")


Part: TypeAlias = Text | Image | PDF
"""One part of a message's content."""

Content: TypeAlias = str | tuple[Part, ...]
"""A message's content: plain text, or parts."""


def parts_of(content: object) -> Content:
    """`content` as a message holds it: a string as it is, a sequence of strings and parts as a
    tuple of parts; `TypeError` for anything else."""
    if isinstance(content, str):
        return content
    if isinstance(content, (Text, Image, PDF)):
        return (content,)
    if isinstance(content, (list, tuple)):
        parts: list[Part] = []
        for item in content:
            if isinstance(item, str):
                parts.append(Text(item))
            elif isinstance(item, (Text, Image, PDF)):
                parts.append(item)
            else:
                raise TypeError(
                    f"message content parts are str, Text, Image or PDF, not {type(item).__name__}"
                )
        return tuple(parts)
    raise TypeError(
        f"message content is a str or a list of parts, not {type(content).__name__}"
    )


def content_text(content: Content) -> str:
    """The text of `content` (its text parts joined by blank lines; images and PDFs left out)."""
    if isinstance(content, str):
        return content
    return "\n\n".join(part.text for part in content if isinstance(part, Text))


def _texts(part: object, what: str, **fields: object) -> None:
    """Refuse a field of `part` that is neither text nor `None` (`TypeError` naming it): it
    failed only in a call, with a raw error from the response cache's key or a provider."""
    for name, value in fields.items():
        if value is not None and not isinstance(value, str):
            raise TypeError(f"{what} {name} must be a str or None, not {type(value).__name__}")


def _one_source(data: bytes | None, url: str | None, what: str) -> None:
    if (data is None) == (url is None):
        raise ValueError(f"{what} takes either data (bytes) or a url, not both or neither")
    if data is not None and not isinstance(data, bytes):
        raise TypeError(f"{what} data must be bytes, not {type(data).__name__}")
    if data is not None and not data:
        raise ValueError(f"{what} data is empty")


def _data_url(media_type: str, data: bytes) -> str:
    return f"data:{media_type};base64,{base64.b64encode(data).decode('ascii')}"
