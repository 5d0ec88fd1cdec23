"""The defensive parser: stop reason -> JSON -> enum policy -> schema -> contract -> checks."""

from sdk.parsing._compiled import CompiledContract
from sdk.parsing._compiled import compile_contract
from sdk.parsing._limits import MAX_DEPTH
from sdk.parsing.incremental import Partial
from sdk.parsing.incremental import PartialReader
from sdk.parsing.parser import DEFAULT_CLEAN_STOPS
from sdk.parsing.parser import EnumCase
from sdk.parsing.parser import Note
from sdk.parsing.parser import Parsed
from sdk.parsing.parser import ParseDetails
from sdk.parsing.parser import StopDetails
from sdk.parsing.parser import check_stop
from sdk.parsing.parser import parse
from sdk.parsing.parser import resolve_stop_reason

__all__ = [
    "DEFAULT_CLEAN_STOPS",
    "MAX_DEPTH",
    "CompiledContract",
    "EnumCase",
    "Note",
    "ParseDetails",
    "Parsed",
    "Partial",
    "PartialReader",
    "StopDetails",
    "check_stop",
    "compile_contract",
    "parse",
    "resolve_stop_reason",
]
