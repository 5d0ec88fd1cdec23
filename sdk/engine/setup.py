"""From a client method's arguments to a started call: the call spec resolved (the client's
defaults with the call's options, each checked), everything vetted before anything is sent, the
output kind chosen, the attempts machine built. All that the sync and async clients share (they
differ by the `await` alone), and what batch jobs and `sdk.wire` build their calls with.
"""

from __future__ import annotations

from collections.abc import Callable
from collections.abc import Mapping
from dataclasses import replace
from typing import Any
from typing import cast

from sdk._tools import ToolOffer
from sdk._values.sendable import check_text
from sdk.contract import Contract
from sdk.contract import is_contract
from sdk.contract import require_contract
from sdk.engine.attempts import Attempts
from sdk.engine.conversation import conversation
from sdk.engine.envelope import Envelope
from sdk.engine.envelope import envelope_of
from sdk.engine.kinds import Document
from sdk.engine.kinds import GrammarOutput
from sdk.engine.kinds import OutputKind
from sdk.engine.kinds import Shared
from sdk.engine.kinds import TwoPhase
from sdk.engine.kinds.guided import Guided
from sdk.engine.kinds.tools import Tools
from sdk.engine.kinds.tools import tool_conversation
from sdk.engine.options import CallSpec
from sdk.engine.options import ClientOptions
from sdk.engine.options import Method
from sdk.grammar import Grammar
from sdk.parsing.parser import validators_context
from sdk.prompt import Prompt
from sdk.prompt import RenderedPrompt
from sdk.providers._base import Message
from sdk.providers._base import unsupported
from sdk.providers._provider import Provider

__all__ = [
    "ClientOptions",
    "check_every_model",
    "output_kind",
    "reachable_models",
    "start_call",
    "start_tools_call",
    "vet_on_reached",
]


def start_call(
    config: CallSpec,
    provider: Provider,
    output: Any,
    options: Mapping[str, object],
    method: Method,
) -> Attempts:
    """A document or grammar call, vetted and started (`on_call` has run)."""
    spec = _checked(config.for_call(options, method, lambda: provider.own_options))
    kind = output_kind(output, spec, provider)
    asked = kind.grammar if isinstance(kind, GrammarOutput) else _document(kind).contract
    spec, rendered = _with_prompt(spec, asked)
    turns = _turns(spec, asked)
    return _machine(spec, provider, kind, _marked(turns, rendered), rendered)


def _turns(spec: CallSpec, asked: type[Contract] | Grammar) -> tuple[Message, ...]:
    """The call's first messages (`conversation`), made once per spec and output where they
    are made of text and parts that cannot change (a client's calls with the same prompt and
    source resolve to one spec: `CallSpec.for_call`)."""
    inputs = spec.inputs
    assert not isinstance(inputs.prompt, Prompt)  # rendered by `_with_prompt`
    kept = spec.last_call.turns(asked)
    if kept is not None:
        return kept
    turns = conversation(asked, inputs.prompt, inputs.messages, inputs.source)
    spec.last_call.keep_turns(asked, inputs, turns)
    return turns


def output_kind(output: Any, spec: CallSpec, provider: Provider) -> OutputKind[Any]:
    """The output kind of `generate(output)` through `provider`: a grammar's sentence, or a
    document (a contract, a list, a union), with guided abstention when the spec asks for it
    (reasoning aside: the machine wraps the kind for it). What was fitted for another document
    or another model (abstention thresholds, a confidence calibration) is refused here, before
    anything is sent: against the model of every provider the call may reach (a
    `FallbackProvider`'s each), where the provider knows it."""
    if isinstance(output, Grammar):
        if spec.output.abstention != "none":
            raise _not_a_document("a grammar")
        return GrammarOutput(output, spec.parsing)
    envelope: Envelope | None = None
    contract: type[Contract]
    if is_contract(output):
        contract = output  # (a contract class, most calls: no envelope's, no lookup for one)
    else:
        envelope = envelope_of(output)
        if envelope is None:
            require_contract(output, spec.method.name)  # (raises: not a contract)
        contract = envelope.contract if envelope is not None else cast(type[Contract], output)
    document = Document(contract, envelope, spec.parsing)
    # (the schema's name and fingerprint only where a fitted record is checked against them:
    # most calls, every cache hit among them, have none)
    calibration = spec.parsing.confidence_calibration
    if calibration is not None:
        schema = document.schema
        check_every_model(calibration.check_fitted, schema.name, schema.fingerprint, provider)
    if spec.output.abstention == "none":
        return document
    if envelope is not None:
        raise _not_a_document("a list, a union")
    Guided.check(document)
    thresholds = spec.output.abstention_thresholds
    if thresholds is not None:
        schema = document.schema
        check_every_model(thresholds.check_contract, schema.name, schema.fingerprint, provider)
    return Guided(document, thresholds)


def check_every_model(
    check: Callable[[str, str, str | None], None], name: str, fingerprint: str, provider: Provider
) -> None:
    """Run `check` (a fitted record's: `Calibration.check_fitted`,
    `Thresholds.check_contract`) for the contract `name`/`fingerprint` against the model of
    every provider a call through `provider` may reach: what was fitted on one model is not
    applied to another's values (`reachable_models`)."""
    for model in reachable_models(provider):
        check(name, fingerprint, model)


def reachable_models(provider: Provider) -> dict[str | None, None]:
    """The models of the providers a call through `provider` may reach (a `FallbackProvider`'s
    each, and the providers of a list behind a `ConcurrencyLimit` in it, which the call reaches
    through that one), each once, in order (`None`: one that does not know its model up front)."""
    return dict.fromkeys(reached.model for reached in provider.reached())


def _document(kind: OutputKind[Any]) -> Document:
    return kind.inner if isinstance(kind, Guided) else cast(Document, kind)


def _not_a_document(what: str) -> ValueError:
    return ValueError(f'abstention="guided" applies to a contract\'s document, not {what}')


def start_tools_call(
    config: CallSpec,
    provider: Provider,
    offer: ToolOffer,
    options: Mapping[str, object],
    method: Method,
) -> Attempts:
    """A tool-call call, vetted and started."""
    spec = _checked(config.for_call(options, method, lambda: provider.own_options))
    if spec.output.abstention != "none":
        raise _not_a_document("tool calls")
    spec, rendered = _with_prompt(spec, None)
    inputs = spec.inputs
    turns = tool_conversation(inputs.prompt, inputs.messages, inputs.source)
    return _machine(spec, provider, Tools(offer, spec.parsing), _marked(turns, rendered), rendered)


def _checked(spec: CallSpec) -> CallSpec:
    """Refuse what no single option's declaration can: text no provider can carry, and a
    `context` that would bypass the source (before anything is sent)."""
    if spec.inputs.system is not None:
        check_text(spec.inputs.system, "system")
    validators_context(spec.parsing.source, spec.parsing.context)
    return spec


def _with_prompt(spec: CallSpec, output: Any) -> tuple[CallSpec, RenderedPrompt | None]:
    """A `Prompt` in `prompt=` rendered for the call's output: its user turn becomes the prompt,
    its system prompt the call's (`ValueError` when the call sets one too)."""
    prompt = spec.inputs.prompt
    if not isinstance(prompt, Prompt):
        return spec, None
    rendered = prompt.render(contract=output)
    system = spec.inputs.system
    if rendered.system is not None:
        if system is not None:
            raise ValueError(
                f"{type(prompt).__name__} has its own system prompt: pass system= or the "
                "prompt's, not both"
            )
        check_text(rendered.system, "system")
        system = rendered.system
    [message] = rendered.messages
    text: Any = message.content if isinstance(message.content, str) else list(message.parts)
    inputs = replace(spec.inputs, prompt=text, system=system)
    transport = replace(spec.transport, system=system)
    # (a spec of its own, asking its keys of the client's as the call's did: `LastCall.keyed`)
    return spec.last_call.keyed(replace(spec, inputs=inputs, transport=transport)), rendered


def _marked(turns: tuple[Message, ...], rendered: RenderedPrompt | None) -> tuple[Message, ...]:
    """The first turn with the template's static prefix marked (the prompt's text leads it)."""
    if rendered is None or not turns:
        return turns
    return (replace(turns[0], static_prefix=rendered.messages[0].static_prefix), *turns[1:])


def vet_on_reached(transport: Shared, provider: Provider) -> None:
    """Refuse, on every provider a call through `provider` may reach (`Provider.reached`: a
    `FallbackProvider`'s each), a sampling option one does not take (`TypeError`) and an
    `extra_body` field one owns (`ValueError`), both naming it (`Provider.vet_options`): at each
    call, and where a client's defaults are set (its constructor, `with_options`)."""
    for candidate in provider.reached():
        candidate.vet_options(transport.options, transport.extra_body)


def _machine(
    spec: CallSpec,
    provider: Provider,
    kind: OutputKind[Any],
    turns: tuple[Message, ...],
    rendered: RenderedPrompt | None = None,
) -> Attempts:
    """Vet the options on every provider the call may go to, then start the attempts machine
    (which vets the output kind: a fallback list skips a provider that cannot carry it)."""
    vet_on_reached(spec.transport, provider)
    reasoning = spec.output.reasoning
    if reasoning == "native" and not provider.supports_native_reasoning:
        raise unsupported(
            provider.name, 'reasoning="native" (no thinking channel)', ['reasoning="two_phase"']
        )
    if reasoning == "two_phase":
        kind = TwoPhase(kind)
    return Attempts(kind, turns, spec, provider, rendered.info if rendered else None)
