"""Prompt templates as contracts: `Prompt` (typed inputs, a name, a version, a fingerprint),
rendered in Jinja2's sandbox to the SDK's messages (see `sdk.prompt._prompt`)."""

from sdk._values.records import PromptInfo
from sdk.prompt._prompt import Prompt
from sdk.prompt._prompt import RenderedPrompt
from sdk.prompt._prompt import prompt_fingerprint
from sdk.prompt._template import TemplateError
from sdk.prompt._view import ContractView
from sdk.prompt._view import FieldView

__all__ = [
    "ContractView",
    "FieldView",
    "Prompt",
    "PromptInfo",
    "RenderedPrompt",
    "TemplateError",
    "prompt_fingerprint",
]
