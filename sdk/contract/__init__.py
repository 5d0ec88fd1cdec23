"""Contracts: strict, round-trip Pydantic models whose wire form is pinned.

Four permissive defaults of ordinary JSON libraries are closed here (see the reference texts):
integers accepted as enum members, an explicit `null` accepted on a required field, unknown
members silently dropped, and comma-joined enum strings. A contract rejects all four, from JSON
and from Python alike, and writes exactly the wire names it reads.

`sdk.contract.derived` builds contracts from a contract (`widen`, `answer_first`), for the eval.
"""

from sdk.contract._base import *  # noqa: F403  (the package's face: `_base` is all of it)
from sdk.contract._base import __all__ as __all__
