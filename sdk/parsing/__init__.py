"""The defensive parser: stop reason -> JSON -> enum policy -> schema -> contract -> checks."""

from sdk.parsing._compiled import CompiledContract, compile_contract
from sdk.parsing._limits import MAX_DEPTH
from sdk.parsing.incremental import Partial, PartialReader
from sdk.parsing.parser import (
    DEFAULT_CLEAN_STOPS,
    EnumCase,
    Note,
    Parsed,
    check_stop,
    parse,
    resolve_stop_reason,
)

__all__ = [
    "DEFAULT_CLEAN_STOPS",
    "MAX_DEPTH",
    "CompiledContract",
    "EnumCase",
    "Note",
    "Parsed",
    "Partial",
    "PartialReader",
    "check_stop",
    "compile_contract",
    "parse",
    "resolve_stop_reason",
]
