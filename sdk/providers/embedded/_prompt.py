"""What `EmbeddedProvider`'s model reads: the chat messages (the schema instruction in the
system turn) and the short description of the contract's fields."""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from typing import TYPE_CHECKING
from typing import Any

from sdk.providers._base import CompletionRequest
from sdk.schema._shape import resolve

if TYPE_CHECKING:
    pass


def schema_instruction(schema: Mapping[str, Any]) -> str:
    """A short description of the document to write: each top-level field with its type and its
    description, in generation order, and the key skeleton.

    The grammar enforces the form but knows nothing of meaning; a model that is not told what
    `total` or `evidence` means fills them with whatever the grammar allows. Kept short because
    a small model's attention is short too.
    """
    root = dict(schema)
    properties: Mapping[str, Any] = root.get("properties", {})
    lines = ["Reply with one JSON object and nothing else. Its fields, in this order:"]
    for name, node in properties.items():
        description = node.get("description") if isinstance(node, dict) else None
        label = _type_label(root, node) if isinstance(node, dict) else "any"
        line = f'- "{name}" ({label})'
        lines.append(f"{line}: {description}" if description else line)
    skeleton = ", ".join(f'"{name}": ...' for name in properties)
    lines.append(f"Format: {{{skeleton}}}")
    return "\n".join(lines)


def _type_label(root: dict[str, Any], node: dict[str, Any], depth: int = 0) -> str:
    """A few words for a schema node's type: `string or null`, `"a", "b" or "c"`, ..."""
    _, node = resolve(root, node)
    if "enum" in node:
        return _choices([json.dumps(value) for value in node["enum"]])
    if "const" in node:
        return json.dumps(node["const"])
    options = node.get("anyOf") or node.get("oneOf")
    if isinstance(options, list):
        labels = [_type_label(root, o, depth) for o in options if isinstance(o, dict)]
        return " or ".join(dict.fromkeys(labels))
    kind = node.get("type")
    if isinstance(kind, list):
        return " or ".join(str(k) for k in kind)
    if kind == "array":
        items = node.get("items")
        inner = _type_label(root, items, depth + 1) if isinstance(items, dict) else "values"
        return f"list of {inner}"
    if kind == "object":
        names = list(node.get("properties", {}))
        if not names or depth > 1:
            return "object"
        return "object with " + ", ".join(f'"{name}"' for name in names)
    return str(kind) if kind else "any"


def _choices(values: list[str]) -> str:
    if len(values) < 2:
        return "".join(values)
    return ", ".join(values[:-1]) + f" or {values[-1]}"


# A plain ChatML template, for a GGUF without one of its own.
_CHATML = (
    "{% for message in messages %}{{'<|im_start|>' + message['role'] + '\n' + message['content']"
    " + '<|im_end|>' + '\n'}}{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
)


# Stands in for a message's text while the chat template renders (see `prompt_tokens`).
_PLACEHOLDER = "\u27e6sdk-message-{}\u27e7"
_PLACEHOLDER_RE = re.compile("\u27e6sdk-message-([0-9]+)\u27e7")


# The example a completion prompt opens with: a pretrained model continues a pattern, so it is
# shown one: copied values exactly as written, null for what the input does not say.
_EXAMPLE = (
    "Reply with one JSON object and nothing else. Its fields, in this order:\n"
    '- "sender" (string or null): who sent it\n'
    '- "reference" (string or null): the reference number\n'
    '- "amount" (number or null): the amount\n'
    '- "due" (string or null): when it is due\n\n'
    "Input: Hello, this is Brightwater Utilities. Your account ref. BW-20931 is now settled; "
    "we received 48.20 EUR. Thank you!\n"
    'Output: {"sender": "Brightwater Utilities", "reference": "BW-20931", "amount": 48.2, '
    '"due": null}\n\n'
)
_LABELS = {"system": "", "user": "Input: ", "assistant": "Output: "}


def completion_prompt(messages: list[dict[str, str]]) -> str:
    """The conversation as a completion prompt, for a pretrained model (a GGUF without a chat
    template): one worked example, then the system text, each turn after its label (`Input:`,
    `Output:`), and `Output:` for the model to go on from. No special tokens: the engine adds
    the model's BOS, and the content is tokenized as text."""
    parts = [_EXAMPLE]
    for message in messages:
        parts.append(f"{_LABELS.get(message['role'], '')}{message['content']}\n")
        if message["role"] == "system":
            parts.append("\n")
    parts.append("Output:")
    return "".join(parts)


def _chat(request: CompletionRequest, instruction: str | None) -> list[dict[str, str]]:
    """The request as chat-template messages, the schema instruction in the system turn."""
    system = "\n\n".join(part for part in (request.system, instruction) if part)
    messages: list[dict[str, str]] = [{"role": "system", "content": system}] if system else []
    messages.extend({"role": m.role, "content": m.text} for m in request.messages)
    return messages
