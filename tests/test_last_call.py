"""A client resolves a call it makes again once (issue 30 item 8): `CallSpec.for_call` keeps the
last call's spec and `start_call` its first messages (`sdk.engine.options.LastCall`), where the
call's options are text alone. What could change between two calls (a list, a `str` subclass, a
provider's own option, a document too large to keep) is resolved at every call, and threads
calling at once each get their own call."""

from __future__ import annotations

import copy
import dataclasses
import gc
import json
import os
import pickle
import sys
import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any
from typing import get_origin
from unittest import mock

import pytest
from hypothesis import given
from hypothesis import settings
from hypothesis import strategies as st
from pydantic import BaseModel

from contracts import Decision
from sdk import PDF
from sdk import Contract
from sdk import Image
from sdk import Message
from sdk import Prompt
from sdk import StructuredClient
from sdk import Text
from sdk._values import kept as _kept
from sdk._values.declared import union_members
from sdk._values.kept import KEPT_TEXT
from sdk._values.kept import unchanging_part
from sdk.abstention import Thresholds
from sdk.abstention import ThresholdsFileError
from sdk.cache import LastKey
from sdk.cache import MemoryCache
from sdk.cache import _key
from sdk.cache import cache_key
from sdk.engine.options import GENERATE
from sdk.engine.options import STREAM
from sdk.engine.options import CallSpec
from sdk.engine.options import declarations
from sdk.providers import CompletionRequest
from sdk.providers import Sampling
from sdk.providers import TestProvider
from sdk.providers._base import JsonDocument
from sdk.providers._profile import NO_SAMPLING
from tests.shared_file_process import WAIT


def _echo(request: CompletionRequest) -> str:
    """A reply that says which prompt it answered (the last turn's text, or its parts)."""
    content = request.messages[-1].content
    said = content if isinstance(content, str) else repr(content)
    return json.dumps({"reasoning": said, "answer": "approve", "confidence": "high"})


def _client() -> tuple[StructuredClient, TestProvider]:
    provider = TestProvider([_echo], repeat=True)
    return StructuredClient(provider), provider


def _sent(provider: TestProvider) -> str:
    content = provider.requests[-1].messages[-1].content
    assert isinstance(content, str)
    return content


def _counted(name: str) -> tuple[list[Any], Any]:
    """A spy on `sdk.cache._key.<name>` (a part of the key: `_own_key`, `_common`) that makes it
    as before: the values made while the patch (a context manager) is on, and the patch."""
    made: list[Any] = []
    real = getattr(_key, name)

    def counting(*arguments: Any) -> Any:
        made.append(real(*arguments))
        return made[-1]

    return made, mock.patch.object(_key, name, counting)


class Echoed(Contract):
    """Another contract with the fields of `_echo`'s reply."""

    reasoning: str
    answer: str
    confidence: str


class Shouting(str):
    """A `str` that compares equal to any other text (as a case-blind or normalizing subclass
    might): it must not be taken for the last call's prompt."""

    __hash__ = str.__hash__

    def __eq__(self, other: object) -> bool:
        return isinstance(other, str)


def test_a_call_made_again_resolves_to_the_spec_it_made_before() -> None:
    client, _ = _client()
    spec = client.config
    first = spec.for_call({"prompt": "Decide.", "source": "The memo."}, GENERATE)
    again = spec.for_call({"prompt": "".join(["Dec", "ide."]), "source": "The memo."}, GENERATE)
    assert again is first  # (equal text, another object: the same call)
    other = spec.for_call({"prompt": "Decide again.", "source": "The memo."}, GENERATE)
    assert other is not first and other.inputs.prompt == "Decide again."
    streamed = spec.for_call({"prompt": "Decide again.", "source": "The memo."}, STREAM)
    assert streamed is not other and streamed.method is STREAM
    # The client's own spec is not changed by its calls.
    assert (spec.inputs.prompt, spec.inputs.source, spec.method) == (None, None, GENERATE)


def test_each_call_sends_its_own_prompt_and_source() -> None:
    client, provider = _client()
    for prompt, source in [("One.", "a"), ("One.", "a"), ("Two.", "a"), ("One.", "b")]:
        result = client.generate(Decision, prompt=prompt, source=source)
        assert _sent(provider) == f"{prompt}\n\n<document>\n{source}\n</document>"
        assert result.value.reasoning == _sent(provider)


def test_the_first_message_names_the_contract_of_each_call() -> None:
    # (no prompt: the first message asks for the contract by name, so it is made per contract)
    client, provider = _client()
    for contract in (Decision, Echoed, Decision):
        client.generate(contract, source="The memo.")
        expected = f"Fill in a {contract.__name__} from this document."
        assert _sent(provider) == f"{expected}\n\n<document>\nThe memo.\n</document>"


def test_a_str_subclass_equal_to_everything_is_not_taken_for_the_last_prompt() -> None:
    client, provider = _client()
    client.generate(Decision, prompt="Approve it.")
    client.generate(Decision, prompt=Shouting("Refuse it."))
    assert _sent(provider) == "Refuse it."
    client.generate(Decision, prompt="Approve it.")
    assert _sent(provider) == "Approve it."


def test_messages_changed_in_place_are_sent_as_they_are_now() -> None:
    client, provider = _client()
    messages = [Message("user", "First question.")]
    client.generate(Decision, messages=messages)
    messages[0] = Message("user", "Second question.")
    client.generate(Decision, messages=messages)
    assert _sent(provider) == "Second question."


def test_a_document_larger_than_the_bound_is_not_kept() -> None:
    spec = CallSpec.defaults()
    large = "x" * (KEPT_TEXT + 1)
    first = spec.for_call({"prompt": "Read.", "source": large}, GENERATE)
    assert spec.for_call({"prompt": "Read.", "source": large}, GENERATE) is not first
    fits = "x" * (KEPT_TEXT - len("Read."))
    first = spec.for_call({"prompt": "Read.", "source": fits}, GENERATE)
    assert spec.for_call({"prompt": "Read.", "source": fits}, GENERATE) is first


PNG = b"\x89PNG\r\n\x1a\n" + bytes(64)


class _Bytes(bytes):
    """Bytes that compare equal to any other bytes (as a subclass with a rule of its own may)."""

    __hash__ = bytes.__hash__

    def __eq__(self, other: object) -> bool:
        return isinstance(other, bytes)


class _Screenshot(Image):
    """An image of the user's own kind (a subclass may hold state of its own)."""


def test_a_call_with_parts_made_again_is_resolved_and_keyed_once() -> None:
    """A prompt of text, an image and a PDF (a new list each call, equal parts) resolves to the
    spec and first messages made before, and its key is kept (`_own_key` made once); another
    PDF is another call."""
    client, _ = _client()
    spec = client.config
    pdf = PDF(data=b"%PDF-1.7 one", name="a.pdf")
    first = spec.for_call({"prompt": ["Decide.", Image(data=PNG, media_type="image/png"), pdf]},
                          GENERATE)  # fmt: skip
    again = spec.for_call({"prompt": ["Decide.", Image(data=PNG, media_type="image/png"), pdf]},
                          GENERATE)  # fmt: skip
    assert again is first
    other = spec.for_call({"prompt": ["Decide.", PDF(data=b"%PDF-1.7 two", name="a.pdf")]},
                          GENERATE)  # fmt: skip
    assert other is not first
    computed, counting = _counted("_own_key")
    client = StructuredClient(TestProvider([_echo], repeat=True), cache=MemoryCache())
    prompt = ["Decide.", pdf]
    with counting:
        made = [client.generate(Decision, prompt=list(prompt), source="m.").cached for _ in "abc"]
        assert made == [False, True, True] and len(computed) == 1
        changed = PDF(data=b"%PDF-1.7 changed", name="a.pdf")
        assert not client.generate(Decision, prompt=["Decide.", changed], source="m.").cached
    assert len(computed) == 2


def test_a_prompt_list_changed_in_place_is_sent_as_it_is_now() -> None:
    client, provider = _client()
    prompt: list[Any] = ["First question.", PDF(data=b"%PDF-1.7 one")]
    client.generate(Decision, prompt=prompt)
    prompt[0] = "Second question."
    prompt[1] = PDF(data=b"%PDF-1.7 two")
    client.generate(Decision, prompt=prompt)
    content = provider.requests[-1].messages[-1].content
    assert isinstance(content, tuple)
    assert content[0] == Text("Second question.") and content[1] == PDF(data=b"%PDF-1.7 two")


@pytest.mark.parametrize(
    "part",
    [
        _Screenshot(data=PNG, media_type="image/png"),
        Image(data=_Bytes(PNG), media_type="image/png"),
        PDF(data=_Bytes(b"%PDF-1.7 one")),
        Text(Shouting("Decide.")),
    ],
    ids=["an Image subclass", "an image of a bytes subclass", "a PDF of a bytes subclass",
         "a Text of a str subclass"],
)  # fmt: skip
def test_a_part_that_compares_by_its_own_rule_is_not_taken_for_the_last_one(part: Any) -> None:
    """A part of a subclass, or holding a subclass of `bytes` or `str` (which may say it equals
    what it does not), is resolved, made into messages and keyed at each call: the call after
    it, with other bytes, sends its own."""
    assert not unchanging_part(part)
    spec = CallSpec.defaults()
    first = spec.for_call({"prompt": ["Decide.", part]}, GENERATE)
    assert spec.for_call({"prompt": ["Decide.", part]}, GENERATE) is not first
    client, provider = _client()
    for sent in (part, type(part)(**_other_bytes(part))):
        client.generate(Decision, prompt=["Decide.", sent])
        content = provider.requests[-1].messages[-1].content
        assert isinstance(content, tuple) and content[-1] is sent


def _other_bytes(part: Any) -> dict[str, Any]:
    """The fields of `part` with other content (of the same types)."""
    if isinstance(part, Text):
        return {"text": type(part.text)("Refuse.")}
    fields = {f.name: getattr(part, f.name) for f in dataclasses.fields(part)}
    fields["data"] = type(part.data)(bytes(part.data[:-1]) + b"!")
    return fields


def test_a_provider_s_own_option_is_checked_at_every_call() -> None:
    spec = CallSpec.defaults()
    taken = frozenset({"top_k_words"})
    called = spec.for_call({"top_k_words": "5"}, GENERATE, lambda: taken)
    assert called.transport.options.value("top_k_words") == "5"
    # Through a provider that does not take it, the same options are refused, kept or not.
    with pytest.raises(TypeError, match="top_k_words"):
        spec.for_call({"top_k_words": "5"}, GENERATE)


def test_a_file_named_by_a_path_is_read_again_at_each_call(tmp_path: Path) -> None:
    path = str(tmp_path / "thresholds.json")
    Thresholds.fixed(0.3).save(path)
    spec = CallSpec.defaults()
    options = {"prompt": "Decide.", "abstention": "guided", "abstention_thresholds": path}
    first = spec.for_call(options, GENERATE).output.abstention_thresholds
    Thresholds.fixed(0.9).save(path)  # fitted again between two calls alike
    again = spec.for_call(options, GENERATE).output.abstention_thresholds
    assert first is not None and again is not None
    assert (first.default, again.default) == (0.3, 0.9)
    os.remove(path)
    with pytest.raises(ThresholdsFileError, match=r"thresholds\.json"):
        spec.for_call(options, GENERATE)


def test_every_option_whose_text_names_a_file_is_read_at_each_call() -> None:
    # (a path is text, which `LastCall` would keep: the options that take one say they read it)
    for name, declared in declarations().items():
        takes_path = any(
            get_origin(member) is os.PathLike for member in union_members(declared.annotation)
        )
        reads_file = declared.option is not None and declared.option.reads_file
        assert takes_path == reads_file, name


def test_a_spec_copied_or_pickled_keeps_nothing_of_its_last_call() -> None:
    class Local(Contract):  # (a class defined here cannot be pickled)
        reasoning: str
        answer: str
        confidence: str

    client, _ = _client()
    client.generate(Local, prompt="Decide.", source="The memo.")
    options = {"prompt": "Decide.", "source": "The memo."}
    assert client.config.last_call.spec(GENERATE, options) is not None
    restored = pickle.loads(pickle.dumps(client.config))
    assert restored == client.config and restored.last_call.spec(GENERATE, options) is None
    copied = copy.deepcopy(client.config)
    assert copied == client.config and copied.last_call.spec(GENERATE, options) is None


def test_a_spec_copied_by_replace_keeps_nothing_of_the_one_it_was_copied_from() -> None:
    # (what a spec kept answers for that spec alone: a copy with another prompt, however made,
    # would otherwise be given the first messages of the one it was copied from)
    client, _ = _client()
    client.generate(Decision, prompt="First.")
    spec = client.config.for_call({"prompt": "First."}, GENERATE)
    assert spec.last_call.turns(Decision) is not None  # (the call's messages, kept)
    inputs = dataclasses.replace(spec.inputs, prompt="Second.")
    for copied in (dataclasses.replace(spec, inputs=inputs), spec.for_call({}, STREAM)):
        assert copied.last_call is not spec.last_call
        assert copied.last_call.turns(Decision) is None
        assert copied.last_call.spec(GENERATE, {"prompt": "First."}) is None


def test_a_new_client_spec_resolves_its_own_calls() -> None:
    client, _ = _client()
    first = client.config.for_call({"prompt": "Decide."}, GENERATE)
    changed = client.with_options(max_tokens=100)
    call = changed.config.for_call({"prompt": "Decide."}, GENERATE)
    assert call is not first and call.transport.max_tokens == 100


# --- the key of a request made again (`sdk.cache.LastKey`) ---


def _steps() -> st.SearchStrategy[list[tuple[int, int, int]]]:
    """Steps of a run of requests, each like the one before but for one of its parts (which
    part: scope, turns, sampling options, extra fields, output, wire, source, or none), made
    of which object of that part's pool (objects reused between requests), and whether a
    mutable one was changed in place first (and which)."""
    return st.lists(st.tuples(st.integers(0, 7), st.integers(0, 4), st.integers(0, 6)),
                    max_size=30)  # fmt: skip


@settings(max_examples=400, deadline=None)
@given(_steps())
def test_a_kept_key_is_always_the_key_of_the_request_as_it_is_now(
    steps: list[tuple[int, int, int]],
) -> None:
    """Whatever the run of requests (its common part kept, its own hashed; or all kept), the
    key `LastKey` gives is `cache_key` of the request as it is then: sources short and long
    enough to be remembered (`_key.REMEMBERED_FROM`), held by the turn or not."""
    scopes = [{"provider": "test", "model": "m"}, {"provider": "test", "model": "n"},
              {"provider": "test", "model": "m", "headers": {"x": "1"}}]  # fmt: skip
    image = Image(data=b"\x89PNG", media_type="image/png")
    long = "Clause.\n" * (_key.REMEMBERED_FROM // 8 + 1)
    sources = [None, long, "short", "".join(list(long))]
    turns = [(Message("user", "A?"),), (Message("user", "B?"),), (Message("user", ["A?", image]),),
             (Message("user", f"A?\n\n<document>\n{long}\n</document>"),),
             (Message("user", ["A?", "<document>\nshort\n</document>"]),)]  # fmt: skip
    own: list[object] = ["x"]
    samplings = [NO_SAMPLING, Sampling(temperature=0.5), Sampling(own=(("listed", own),))]
    bodies: list[dict[str, object]] = [{}, {}, {"k": [1]}]
    outputs = [JsonDocument(Decision), JsonDocument(Echoed), JsonDocument(Decision)]
    wires = [{"type": "object"}, {"type": "object", "title": "T"}, None]
    pools: list[list[Any]] = [scopes, turns, samplings, bodies, outputs, wires, sources]
    kept = LastKey()
    made = [0] * len(pools)  # (the pool index of each part of the request)
    for part, index, change in steps:
        if part < len(made):
            made[part] = index % len(pools[part])
        scope, turn, sampling, body, output, wire, source = made
        if change == 1:
            scopes[scope]["model"] = "changed"  # (a scope is made anew by each call; still)
        elif change == 2:
            bodies[body]["added"] = len(bodies[body])  # an extra field set in place
        elif change == 3:
            own.append("more")  # a provider's own option, a caller's list, changed
        elif change == 4:
            outputs[output] = JsonDocument(outputs[output].contract)  # another object, alike
        elif change == 5 and sources[source] is not None:
            sources[source] = "".join(list(sources[source]))  # another string, alike
        request = CompletionRequest(outputs[output], turns[turn], 64, options=samplings[sampling],
                                    extra_body=bodies[body], source=sources[source])  # fmt: skip
        assert kept.key(scopes[scope], request, wires[wire]) == cache_key(
            scopes[scope], request, wires[wire]
        )


def test_a_call_made_again_has_its_key_kept_and_a_changed_call_does_not() -> None:
    """A call made again is given its key kept; a call with another source has its own part
    of the key hashed (`_own_key`), with the part the calls have in common kept (`_common`,
    made once), and another contract has both made."""
    (computed, counting_own), (common, counting_common) = _counted("_own_key"), _counted("_common")
    client = StructuredClient(TestProvider([_echo], repeat=True), cache=MemoryCache())
    with counting_own, counting_common:
        first = client.generate(Decision, prompt="Decide.", source="The memo.")
        again = client.generate(Decision, prompt="Decide.", source="The memo.")
        other = client.generate(Decision, prompt="Decide.", source="Another memo.")
        assert (first.cached, again.cached, other.cached) == (False, True, False)
        assert len(computed) == 2 and computed[0] != computed[1] and len(common) == 1
        echoed = client.generate(Echoed, prompt="Decide.", source="Another memo.")
    assert not echoed.cached and len(computed) == 3 and len(common) == 2


def test_a_client_keeps_no_document_past_what_it_keeps_of_its_last_call(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A call whose source or PDF is over what a client keeps (`sdk._values.kept`) leaves
    nothing of it held by the client once it is over: not its options, messages or request (a
    client's calls share one `LastKey`, which held the last request whole)."""
    monkeypatch.setattr(_key, "_DOCUMENTS", _key._Remembered(16, most_size=0))  # (none held)
    monkeypatch.setattr(_kept, "KEPT_DATA", 1024)
    provider = TestProvider([_echo], repeat=True)
    client = StructuredClient(provider, cache=MemoryCache())
    source = "".join(["S"] * (KEPT_TEXT + 1))
    data = b"%PDF-1.7 " + bytes(2048)
    held = sys.getrefcount(source), sys.getrefcount(data)
    client.generate(Decision, prompt="Decide.", source=source)
    client.generate(Decision, prompt=["Decide.", PDF(data=data)], max_tokens=100)
    provider.requests.clear()
    gc.collect()
    assert (sys.getrefcount(source), sys.getrefcount(data)) == held
    small = b"%PDF-1.7 " + bytes(64)
    client.generate(Decision, prompt=["Decide.", PDF(data=small)])
    assert client.generate(Decision, prompt=["Decide.", PDF(data=small)]).cached


def test_a_last_key_pickled_or_copied_starts_with_nothing_kept() -> None:
    kept = LastKey()
    request = CompletionRequest(JsonDocument(Decision), (Message("user", "A?"),), 64)
    first = kept.key({"provider": "test"}, request, None)
    for copied in (pickle.loads(pickle.dumps(kept)), copy.deepcopy(kept)):
        assert copied._last is None
        assert copied.key({"provider": "test"}, request, None) == first


def test_a_request_made_by_hand_with_lists_is_keyed_as_it_is_now() -> None:
    """A `CompletionRequest` or `Sampling` made by hand may hold lists (the SDK's own hold
    tuples): changed in place between two keys, the second key is the request's as it is."""
    kept = LastKey()
    messages = [Message("user", "A?")]
    stop = ["END"]
    request = CompletionRequest(JsonDocument(Decision), messages, 64,  # type: ignore[arg-type]
                                options=Sampling(stop=stop))  # type: ignore[arg-type]  # fmt: skip
    first = kept.key({"provider": "test"}, request, None)
    messages[0] = Message("user", "B?")
    second = kept.key({"provider": "test"}, request, None)
    assert second == cache_key({"provider": "test"}, request, None) != first
    stop.append("STOP")
    assert (
        kept.key({"provider": "test"}, request, None)
        == cache_key({"provider": "test"}, request, None)
        != second
    )


class _Triage(Prompt):
    version = 1
    template = "Classify this ticket.\n\n{{ ticket }}"

    class Inputs(BaseModel):
        ticket: str


def test_a_call_with_a_prompt_template_shares_the_client_s_common_part() -> None:
    """A call with a `Prompt` template, whose spec is made again to render it, asks its key of
    its client's `LastKey` too: the common part is made once for three tickets."""
    common, counting = _counted("_common")
    client = StructuredClient(TestProvider([_echo], repeat=True), cache=MemoryCache())
    with counting:
        for ticket in ("Printer on fire.", "Screen blank.", "Printer on fire."):
            client.generate(Decision, prompt=_Triage(ticket=ticket), source="The manual.")
    assert len(common) == 1


@pytest.mark.parametrize("cached", [False, True], ids=["no cache", "MemoryCache"])
def test_threads_calling_at_once_each_get_their_own_answer(cached: bool) -> None:
    provider = TestProvider([_echo], repeat=True)
    client = StructuredClient(provider, cache=MemoryCache() if cached else None)
    threads, calls = 16, 40
    barrier = threading.Barrier(threads, timeout=WAIT)

    def run(index: int) -> list[str]:
        barrier.wait()
        return [
            client.generate(
                Decision, prompt=f"Thread {index}, call {number % 3}.", source="Shared."
            ).value.reasoning
            for number in range(calls)
        ]

    with ThreadPoolExecutor(threads) as pool:
        futures = [pool.submit(run, index) for index in range(threads)]
        answered = [future.result(timeout=WAIT) for future in futures]  # (a hang fails)
    for index, answers in enumerate(answered):
        assert answers == [
            f"Thread {index}, call {number % 3}.\n\n<document>\nShared.\n</document>"
            for number in range(calls)
        ]
    # Each thread's three prompts asked once when cached (a hit after), else every call.
    assert len(provider.requests) == threads * (3 if cached else calls)
