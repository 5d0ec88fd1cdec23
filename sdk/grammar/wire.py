"""Provider-shaped pieces for grammar-constrained requests: pure functions, no I/O.

The codecs import these; nothing here talks to a provider.

- llama.cpp (`POST /completion`): `llamacpp_grammar(grammar)` -> `{"grammar": GBNF}`.
- vLLM (`structured_outputs`): `vllm_structured_outputs(grammar)` -> `{"grammar": ...}`,
  GBNF by default (what its default xgrammar backend reads as EBNF; its guidance backend reads
  Lark, `syntax="lark"`).
- OpenAI Responses: a custom tool whose input is constrained by the Lark grammar, forced with
  `tool_choice`; the text is the `input` of the `custom_tool_call` output item (streamed as
  `response.custom_tool_call_input.delta` events). OpenAI takes no grammar for the final
  assistant text, only for custom tool input.
- Anthropic, Ollama and others have no grammar surface: their codecs raise `UnsupportedRequest`
  (`sdk.providers._base.unsupported`) when a grammar request is built, naming what they support.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from collections.abc import Mapping
from typing import Any
from typing import Literal

from sdk.grammar._grammar import Grammar
from sdk.grammar._lark_to_gbnf import to_gbnf

__all__ = [
    "CUSTOM_TOOL_CALL",
    "CUSTOM_TOOL_INPUT_DELTA",
    "custom_tool_choice",
    "custom_tool_name",
    "llamacpp_grammar",
    "openai_custom_tool",
    "read_custom_tool_input",
    "vllm_structured_outputs",
]

CUSTOM_TOOL_CALL = "custom_tool_call"
"""`type` of the Responses output item that carries the constrained text in `input`."""
CUSTOM_TOOL_INPUT_DELTA = "response.custom_tool_call_input.delta"
"""Streaming event type whose `delta` extends the custom tool call's input."""

_TOOL_NAME = re.compile(r"[^A-Za-z0-9_-]")


def llamacpp_grammar(grammar: Grammar) -> dict[str, str]:
    """The `/completion` body fields for a grammar: `{"grammar": GBNF}`.

    The GBNF the grammar was written in, else the conversion from Lark (which raises
    `UnconvertibleGrammar` naming a construct GBNF cannot express).
    """
    return {"grammar": to_gbnf(grammar)}


def vllm_structured_outputs(
    grammar: Grammar, *, syntax: Literal["gbnf", "lark"] = "gbnf"
) -> dict[str, dict[str, str]]:
    """The `structured_outputs` body field for a grammar."""
    text = to_gbnf(grammar) if syntax == "gbnf" else grammar.lark
    return {"structured_outputs": {"grammar": text}}


def custom_tool_name(grammar: Grammar) -> str:
    """The custom tool's name: the grammar's name and version, as `SelectQuery_v1`."""
    return _TOOL_NAME.sub("_", f"{grammar.name}_v{grammar.version}")[:64]


def openai_custom_tool(
    grammar: Grammar, *, name: str | None = None, description: str | None = None
) -> dict[str, Any]:
    """A Responses API `tools` entry: a custom tool whose input is the grammar's language."""
    tool: dict[str, Any] = {
        "type": "custom",
        "name": name or custom_tool_name(grammar),
        "format": {"type": "grammar", "syntax": "lark", "definition": grammar.lark},
    }
    said = description if description is not None else grammar.description
    if said:
        tool["description"] = said
    return tool


def custom_tool_choice(name: str) -> dict[str, str]:
    """The Responses API `tool_choice` that forces the custom tool `name`."""
    return {"type": "custom", "name": name}


def read_custom_tool_input(output: Iterable[Any], name: str) -> str | None:
    """The `input` of the `custom_tool_call` item named `name` in a response's `output`.

    Items may be the openai SDK's models or plain dicts (a wire body). None when the model
    made no such call: the reply has no text then, not an empty one (prose or a refusal in its
    place is a refusal; nothing at all is `MissingToolCall`). A second call to the same tool is
    ignored, as `tool_choice` forces exactly one.
    """
    for item in output:
        if _field(item, "type") == CUSTOM_TOOL_CALL and _field(item, "name") == name:
            value = _field(item, "input")
            if not isinstance(value, str):
                raise TypeError(f"custom tool call {name!r} has a non-string input: {value!r}")
            return value
    return None


def _field(item: Any, key: str) -> Any:
    if isinstance(item, Mapping):
        return item.get(key)
    return getattr(item, key, None)
