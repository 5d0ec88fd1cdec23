"""Providers: one module per provider family, each a sans-IO request builder and response reader."""

from sdk.providers._base import Completion, CompletionRequest, Message, Provider, TextDelta

__all__ = ["Completion", "CompletionRequest", "Message", "Provider", "TextDelta"]
