"""The values `sdk.wire` takes and gives: an item to ask about, and a request as it goes out.

Both are plain frozen values (strings, numbers, mappings, `Message`s), so they pickle: a
distributed engine's driver can make them and its workers use them.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from collections.abc import Sequence
from dataclasses import dataclass
from dataclasses import field
from typing import Any

from sdk.engine.conversation import MessageLike
from sdk.engine.conversation import PromptLike

__all__ = ["Item", "WireRequest"]


@dataclass(frozen=True, slots=True)
class Item:
    """What one call asks about: a prompt (text, or text and parts) or whole `messages`, the
    source document, the system prompt, and, for a prompt template (anything with a
    `render(**variables)` method, such as `sdk.Prompt`), the template's `variables`."""

    prompt: PromptLike | Any | None = None
    messages: Sequence[MessageLike] | None = None
    source: str | None = None
    system: str | None = None
    variables: Mapping[str, Any] | None = None

    def inputs(self) -> dict[str, Any]:
        """The call options this item sets (`prompt`, `messages`, `system`, `source`), a
        template rendered with its variables first. An `sdk.Prompt` class with its variables
        becomes the prompt it makes, which the call renders as a client's call does (for the
        output's contract, its system prompt the call's, its name, version and fingerprint on
        the result and in the cache key)."""
        prompt, messages = self.prompt, self.messages
        if self.variables is not None:
            prompt, messages = self._filled(prompt)
        given = {"prompt": prompt, "messages": messages, "system": self.system,
                 "source": self.source}  # fmt: skip
        return {name: value for name, value in given.items() if value is not None}

    def _filled(self, template: Any) -> tuple[Any, Any]:
        """The prompt (or messages) `template` makes of `variables`."""
        from sdk.prompt import Prompt

        variables = dict(self.variables or {})
        if isinstance(template, type) and issubclass(template, Prompt):
            return template(**variables), None
        if isinstance(template, Prompt):
            raise TypeError(
                f"Item.variables fill a prompt template, and {type(template).__name__}(...) "
                "holds its inputs already: pass the class with variables=, or the instance "
                "without them"
            )
        render = getattr(template, "render", None)
        if not callable(render):
            raise TypeError(
                "Item.variables fill a prompt template: prompt must have a render() method "
                f"(an sdk.Prompt), not {type(template).__name__}"
            )
        rendered = render(**variables)
        return (rendered, None) if isinstance(rendered, str) else (None, rendered)


@dataclass(frozen=True, slots=True)
class WireRequest:
    """One request exactly as the provider's client sends it: the HTTP method, the path (with
    its query, under the client's base URL), the headers that are not secrets (no API key, no
    authorization, none of the client's transport bookkeeping) and the JSON body."""

    method: str
    path: str
    headers: Mapping[str, str] = field(default_factory=dict)
    body: dict[str, Any] = field(default_factory=dict)

    def content(self) -> bytes:
        """The body as JSON bytes (UTF-8, compact)."""
        return json.dumps(self.body, ensure_ascii=False, separators=(",", ":")).encode()
