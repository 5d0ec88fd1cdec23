"""The defensive parser: stop reason -> JSON -> enum policy -> schema -> contract -> checks."""

from sdk.parsing import _reader_build

# The compiled reader when it is current, else its source (`_reader_build`): before the first
# import of the reader.
_reader_build.use_current_reader()

from sdk.parsing._compiled import CompiledContract  # noqa: E402
from sdk.parsing._compiled import compile_contract  # noqa: E402
from sdk.parsing._limits import MAX_DEPTH  # noqa: E402
from sdk.parsing.incremental import Partial  # noqa: E402
from sdk.parsing.incremental import PartialReader  # noqa: E402
from sdk.parsing.parser import DEFAULT_CLEAN_STOPS  # noqa: E402
from sdk.parsing.parser import EnumCase  # noqa: E402
from sdk.parsing.parser import Note  # noqa: E402
from sdk.parsing.parser import Parsed  # noqa: E402
from sdk.parsing.parser import ParseDetails  # noqa: E402
from sdk.parsing.parser import StopDetails  # noqa: E402
from sdk.parsing.parser import check_stop  # noqa: E402
from sdk.parsing.parser import parse  # noqa: E402
from sdk.parsing.parser import resolve_stop_reason  # noqa: E402

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
