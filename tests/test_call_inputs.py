"""What a call refuses before anything is sent, whatever the provider: misspelled keywords
(with "did you mean"), option values of the wrong type, wrong-shaped or empty conversations and
text no provider can carry; and how a call's `extra_body` meets the client's."""

from __future__ import annotations

import asyncio
import json
import re
from typing import Any

import pytest
from hypothesis import given
from hypothesis import settings
from hypothesis import strategies as st

from contracts import Decision
from sdk import AsyncStructuredClient
from sdk import Message
from sdk import StructuredClient
from sdk import Tool
from sdk._values.position import TextPosition
from sdk._values.sendable import check_text
from sdk.cache import MemoryCache
from sdk.cache import SQLiteCache
from sdk.hooks import Hooks
from sdk.providers import AnthropicProvider
from sdk.providers import OpenAIChatProvider
from sdk.providers import TestProvider
from tests.wire_support import Wire
from tests.wire_support import anthropic_client
from tests.wire_support import anthropic_reply
from tests.wire_support import chat_reply
from tests.wire_support import openai_client

VALID = {"reasoning": "Within policy.", "answer": "approve", "confidence": "high"}
TEXT = json.dumps(VALID)
TOOL = Tool(Decision, name="decide")


class Recorder(Hooks):
    """Every hook event, by name."""

    def __init__(self) -> None:
        self.events: list[str] = []

    def on_call(self, *args: Any, **kwargs: Any) -> None:
        self.events.append("on_call")

    def on_error(self, *args: Any, **kwargs: Any) -> None:
        self.events.append("on_error")

    def on_failure(self, *args: Any, **kwargs: Any) -> None:
        self.events.append("on_failure")


# --- misspelled keywords ---


@pytest.mark.parametrize(
    ("method", "typo", "meant"),
    [
        ("call_tools", "tool_choise", "tool_choice"),
        ("stream_tools", "parallel_tool_call", "parallel_tool_calls"),
        ("call_tools", "tool", "tools"),
    ],
)
def test_a_misspelled_tool_keyword_says_which_one_was_meant(
    method: str, typo: str, meant: str
) -> None:
    provider = TestProvider([TEXT])
    client = StructuredClient(provider)
    with pytest.raises(TypeError, match=rf"'{typo}' \(did you mean '{meant}'\?\)") as info:
        result = getattr(client, method)(tools=[TOOL], prompt="Decide.", **{typo: "required"})
        list(result) if method == "stream_tools" else None
    assert "extra_body" not in str(info.value)  # the keyword is not a raw field either
    assert provider.requests == []

    async def run_async() -> None:
        aclient = AsyncStructuredClient(provider)
        call = getattr(aclient, method)(tools=[TOOL], prompt="Decide.", **{typo: "required"})
        if method == "stream_tools":
            [item async for item in call]
        else:
            await call

    with pytest.raises(TypeError, match=rf"did you mean '{meant}'"):
        asyncio.run(run_async())
    assert provider.requests == []


def test_a_misspelled_constructor_keyword_says_which_one_was_meant() -> None:
    provider = TestProvider([TEXT])
    with pytest.raises(TypeError, match=r"did you mean 'max_concurrency'"):
        AsyncStructuredClient(provider, max_concurency=3)  # type: ignore[call-arg]
    with pytest.raises(TypeError, match=r"did you mean 'sleep'"):
        StructuredClient(provider, slep=None)  # type: ignore[call-arg]


def test_an_unknown_name_with_nothing_close_points_to_extra_body() -> None:
    with pytest.raises(TypeError, match=r"'zzz_brand_new'; raw request fields go in extra_body"):
        StructuredClient(TestProvider([TEXT])).generate(Decision, prompt="x", zzz_brand_new=1)


# --- option values ---


@pytest.mark.parametrize(
    ("option", "value", "said"),
    [
        ("deadline", "10", "deadline must be a number of seconds or None"),
        ("attempt_deadline", [1], "attempt_deadline must be a number of seconds or None"),
        ("stop", 5, "stop must be a string or a list of strings"),
        ("stop", ["END", 3], "stop must be a string or a list of strings"),
        ("temperature", "hot", "temperature must be a number"),
        ("temperature", True, "temperature must be a number"),
        ("seed", 1.5, "seed must be a whole number"),
        ("system", 7, "system must be a string or None"),
        ("extra_body", ["metadata"], "extra_body must be a mapping"),
    ],
)
def test_an_option_of_the_wrong_type_is_a_type_error_before_sending(
    option: str, value: Any, said: str
) -> None:
    wire = Wire(chat_reply(text=TEXT))
    provider = OpenAIChatProvider(openai_client(wire), model="gpt-5.1-mini")
    recorder = Recorder()
    client = StructuredClient(provider, hooks=[recorder])
    with pytest.raises(TypeError, match=said):
        client.generate(Decision, prompt="Approve?", **{option: value})
    with pytest.raises(TypeError, match=said):  # the same as a client default
        client.with_options(**{option: value})
    assert wire.requests == [] and recorder.events == []


def test_a_non_positive_deadline_is_still_a_value_error() -> None:
    with pytest.raises(ValueError, match="deadline must be a positive number"):
        StructuredClient(TestProvider([TEXT])).generate(Decision, prompt="x", deadline=0)


# --- the conversation ---


@pytest.mark.parametrize(
    ("messages", "error", "said"),
    [
        ("hello", TypeError, "messages must be a list of Message"),
        ({"role": "user", "content": "hi"}, TypeError, "messages must be a list of Message"),
        ([("user", "hi")], TypeError, r"messages must be a list of Message .*not \[\(.user."),
        ([{"role": "robot", "content": "hi"}], ValueError, "role 'user' or 'assistant'"),
        ([], ValueError, "messages is empty"),
    ],
)
def test_a_wrong_shaped_conversation_is_refused_before_sending(
    messages: Any, error: type[Exception], said: str
) -> None:
    provider = TestProvider([TEXT])
    with pytest.raises(error, match=said):
        StructuredClient(provider).generate(Decision, messages=messages)
    with pytest.raises(error, match=said):
        StructuredClient(provider).call_tools(tools=[TOOL], messages=messages)
    assert provider.requests == []


def test_a_message_with_an_unknown_role_cannot_be_made() -> None:
    with pytest.raises(ValueError, match=r"not 'robot' \(pass the system prompt as system="):
        Message("robot", "hi")  # type: ignore[arg-type]


@pytest.mark.parametrize(
    "prompt",
    # (the last three: zero-width space, word joiner and byte order mark, a blank Hangul
    # filler, a lone combining mark: nothing a reader sees, as the quotes' check reads them)
    ["", "   \n", [], ["", " "], "\u200b\u2060\ufeff", ["\u3164", " \u200d"], "\u0301"],
)
def test_an_empty_prompt_is_refused_unless_a_source_says_what_to_read(prompt: Any) -> None:
    provider = TestProvider([TEXT, TEXT])
    with pytest.raises(ValueError, match="prompt is empty"):
        StructuredClient(provider).generate(Decision, prompt=prompt)
    assert provider.requests == []
    StructuredClient(provider).generate(Decision, prompt=prompt, source="The order is 3 days old.")
    assert "The order is 3 days old." in provider.requests[0].messages[0].text


LONE = "refund \ud800 now"


@pytest.mark.parametrize(
    ("where", "options"),
    [
        ("prompt", {"prompt": LONE}),
        ("prompt", {"prompt": ["Approve?", LONE]}),
        ("system", {"prompt": "Approve?", "system": LONE}),
        ("source", {"prompt": "Approve?", "source": LONE}),
        ("messages[1]", {"messages": [Message("user", "a"), Message("assistant", LONE)]}),
    ],
)
def test_a_lone_surrogate_is_refused_before_sending_not_reported_as_a_provider_error(
    where: str, options: dict[str, Any]
) -> None:
    # The SDK clients would fail while encoding the request body: the failure is the caller's,
    # said before the call starts (no attempt, no hook), naming where the bad character is.
    wire = Wire(anthropic_reply(text=TEXT))
    recorder = Recorder()
    client = StructuredClient(
        AnthropicProvider(anthropic_client(wire), model="claude-sonnet-4-6"), hooks=[recorder]
    )
    said = rf"{re.escape(where)} is not valid Unicode text: a lone surrogate .* at character 7"
    with pytest.raises(ValueError, match=said):
        client.generate(Decision, **options)
    assert wire.requests == [] and recorder.events == []


# The same for the other text a request carries as given: a stop sequence, and the text (or a
# key) anywhere in `extra_body`. On main each was taken where it was set, and every call failed
# as the provider's "unusable reply" (`UnicodeEncodeError` from the client's encoder), an
# attempt counted, with no word of where the character was.
@pytest.mark.parametrize(
    ("options", "said"),
    [
        ({"stop": ["END", LONE]}, "stop must be text a request can carry (no lone surrogate)"),
        ({"stop": LONE}, "stop must be text a request can carry (no lone surrogate)"),
        ({"extra_body": {"metadata": {"user_id": LONE}}},
         "extra_body['metadata']['user_id'] is not valid Unicode text: a lone surrogate"),
        ({"extra_body": {"zz_tags": ["a", LONE]}},
         "extra_body['zz_tags'][1] is not valid Unicode text: a lone surrogate"),
        ({"extra_body": {LONE: 1}}, "extra_body has a key that is not valid Unicode text"),
    ],
)  # fmt: skip
@pytest.mark.parametrize("where", ["client", "call"])
def test_a_lone_surrogate_in_a_stop_sequence_or_extra_body_is_refused_where_it_is_set(
    options: dict[str, Any], said: str, where: str
) -> None:
    wire = Wire(anthropic_reply(text=TEXT))
    recorder = Recorder()
    provider = AnthropicProvider(anthropic_client(wire), model="claude-haiku-4-5")
    with pytest.raises(ValueError, match=re.escape(said)):
        if where == "client":
            StructuredClient(provider, hooks=[recorder], **options)
        else:
            StructuredClient(provider, hooks=[recorder]).generate(
                Decision, prompt="Approve?", **options
            )
    assert wire.requests == [] and recorder.events == []


@settings(max_examples=300, deadline=None)
@given(
    st.lists(st.one_of(st.characters(), st.integers(0xD800, 0xDFFF).map(chr)), max_size=40).map(
        "".join
    )
)
def test_text_is_refused_exactly_where_utf8_cannot_encode_it(text: str) -> None:
    """`check_text` (which encodes UTF-16, the faster) refuses what UTF-8 cannot encode, naming
    the character UTF-8 stops at, and nothing else."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as error:
        where = TextPosition.of(text, error.start).by_index("character")
        with pytest.raises(ValueError, match=f"at {re.escape(where)}$"):
            check_text(text, "source")
    else:
        check_text(text, "source")


# --- extra_body over the client's ---


def test_a_call_s_extra_body_is_merged_over_the_client_s() -> None:
    wire = Wire(anthropic_reply(text=TEXT))
    client = StructuredClient(
        AnthropicProvider(anthropic_client(wire), model="claude-sonnet-4-6"),
        extra_body={"metadata": {"user_id": "u-1"}, "output_config": {"effort": "low"}},
    )
    configured = client.with_options(extra_body={"output_config": {"effort": "high"}})
    configured.generate(Decision, prompt="Approve?", extra_body={"service_tier": "auto"})
    sent = wire.body
    assert sent["metadata"] == {"user_id": "u-1"}  # the client's
    assert sent["output_config"]["effort"] == "high"  # the copy's, over the client's
    assert sent["output_config"]["format"]["type"] == "json_schema"  # the SDK's stays
    assert sent["service_tier"] == "auto"  # the call's
    assert client.config.transport.extra_body["output_config"] == {"effort": "low"}


# --- cache= given the class instead of a store ---


@pytest.mark.parametrize("store", [MemoryCache, SQLiteCache], ids=lambda c: c.__name__)
@pytest.mark.parametrize("where", ["client", "with_options", "call", "async call"])
def test_a_cache_class_instead_of_a_store_says_to_instantiate_it(store: type, where: str) -> None:
    provider = TestProvider([TEXT], repeat=True)
    name = store.__name__
    said = rf"cache={name} is the class, not a value .*: instantiate it, cache={name}\(\)"
    with pytest.raises(TypeError, match=said):
        if where == "client":
            StructuredClient(provider, cache=store).generate(Decision, prompt="x")
        elif where == "with_options":
            StructuredClient(provider).with_options(cache=store).generate(Decision, prompt="x")
        elif where == "call":
            StructuredClient(provider).generate(Decision, prompt="x", cache=store)
        else:
            client = AsyncStructuredClient(provider)
            asyncio.run(client.generate(Decision, prompt="x", cache=store))
    assert provider.requests == []


# A system prompt a reader sees nothing of says nothing, as a prompt does (`sdk._values.blank`):
# on main `system=" "` was sent as the system prompt, wherever it was set. (`""` says "none".)
_BLANK_SYSTEMS = [" \n\t", "\u200b\u2060", "\ufeff\u3164", "\u0301"]


@pytest.mark.parametrize("system", _BLANK_SYSTEMS)
@pytest.mark.parametrize("where", ["client", "with_options", "call", "call_tools", "async call"])
def test_a_blank_system_prompt_is_refused_wherever_it_is_set(system: str, where: str) -> None:
    provider = TestProvider([TEXT])
    said = r"system must be text that is not blank \(\"\" for none\), not "
    with pytest.raises(ValueError, match=said):
        if where == "client":
            StructuredClient(provider, system=system)
        elif where == "with_options":
            StructuredClient(provider).with_options(system=system)
        elif where == "call":
            StructuredClient(provider).generate(Decision, prompt="Approve?", system=system)
        elif where == "call_tools":
            StructuredClient(provider).call_tools(tools=[TOOL], prompt="Go.", system=system)
        else:
            call = AsyncStructuredClient(provider).generate(
                Decision, prompt="Approve?", system=system
            )
            asyncio.run(asyncio.wait_for(call, timeout=30))
    assert provider.requests == []


def test_an_empty_system_prompt_is_none_wherever_it_is_set() -> None:
    # As before: `""` sends no system prompt (rows exported with empty columns carry it).
    wire = Wire(anthropic_reply(text=TEXT))
    provider = AnthropicProvider(anthropic_client(wire), model="claude-sonnet-4-6")
    StructuredClient(provider, system="").generate(Decision, prompt="Approve?")
    StructuredClient(provider).generate(Decision, prompt="Approve?", system="")
    assert ["system" in json.loads(request.content) for request in wire.requests] == [False] * 2
    # ... and keys as none: the same request was a miss of its own (asked and paid again).
    cache = MemoryCache()
    asked = [
        StructuredClient(provider, cache=cache, system="").generate(Decision, prompt="Go?"),
        StructuredClient(provider, cache=cache).generate(Decision, prompt="Go?"),
        StructuredClient(provider, cache=cache).generate(Decision, prompt="Go?", system=""),
    ]
    assert [result.cached for result in asked] == [False, True, True]
    assert len(wire.requests) == 3


# Drawn, though of the categories that hold invisible characters: a spacing mark alone
# (Devanagari's visarga, `Mc`) and an Arabic number sign (a format character a font draws).
@pytest.mark.parametrize("shown", ["\u0903", "\u0600", "\u06dd"])
def test_a_prompt_or_system_prompt_of_drawn_marks_is_sent(shown: str) -> None:
    provider = TestProvider([TEXT, TEXT])
    client = StructuredClient(provider)
    client.generate(Decision, prompt=shown)
    client.generate(Decision, prompt="Approve?", system=shown)
    assert provider.requests[0].messages[0].text == shown
    assert provider.requests[1].system == shown
