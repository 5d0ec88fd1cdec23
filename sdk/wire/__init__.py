"""The transport-free core: a call's request built, and its reply read, without its client.

    request = build_request("openai", Invoice, Item(prompt="Extract it.", source=text),
                            settings={"model": "gpt-5.1-mini"})
    # ... send request.method, request.path, request.headers and request.body anywhere ...
    result = read_reply("openai", Invoice, item, reply_body, settings={"model": "gpt-5.1-mini"})

`build_request` gives the exact request the provider's client sends (the dialect's schema, the
grounding grammar, the control-token checks, every preflight), as a `WireRequest`; `read_reply`
makes the decision a live call makes on a reply (the JSON body, or the text with its finish
reason): the `Result`, or the same typed error with its attempt; `follow_up` gives the messages
of the re-ask a live call would send after it. Pure functions over picklable values: no client
or connection of the caller's is needed, so a distributed engine's workers (Ray Data, Dask,
Spark) can call them on each row and keep every promise of a live call.
"""

from sdk.wire._calls import build_request
from sdk.wire._calls import follow_up
from sdk.wire._calls import read_reply
from sdk.wire._values import Item
from sdk.wire._values import WireRequest

__all__ = ["Item", "WireRequest", "build_request", "follow_up", "read_reply"]
