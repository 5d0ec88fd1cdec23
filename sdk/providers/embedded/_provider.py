"""`EmbeddedProvider` itself: settings, the engine lock, and the four calls (see the package
docstring for how generation works)."""

from __future__ import annotations

import asyncio
import contextlib
import os
import threading
from collections.abc import AsyncIterator
from collections.abc import Generator
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING
from typing import Any
from typing import assert_never

from sdk._files import file_digest
from sdk._tools import ToolOffer
from sdk._values.profile import Profile
from sdk._values.profile import register
from sdk.diagnostics import DEFAULT_LOW_MASS_THRESHOLD
from sdk.providers._base import Completion
from sdk.providers._base import CompletionRequest
from sdk.providers._base import FreeText
from sdk.providers._base import GrammarSentence
from sdk.providers._base import JsonDocument
from sdk.providers._base import Output
from sdk.providers._base import TextDelta
from sdk.providers._base import text_only
from sdk.providers._grounding import GroundingPlan
from sdk.providers._grounding import grounding_plan
from sdk.providers._inprocess import AsyncInProcessTransport
from sdk.providers._inprocess import InProcessCodec
from sdk.providers._inprocess import InProcessTransport
from sdk.providers._profile import WireProfile
from sdk.providers._provider import Provider
from sdk.providers.embedded._decode import Constraint
from sdk.providers.embedded._decode import generate
from sdk.providers.embedded._engine import _Cancelled
from sdk.providers.embedded._engine import _Engine
from sdk.providers.embedded._engine import default_threads
from sdk.providers.embedded._models import model_file
from sdk.providers.embedded._pool import EnginePool
from sdk.providers.embedded._prompt import schema_instruction
from sdk.providers.embedded._sampling import _CALL_OPTIONS
from sdk.providers.embedded._sampling import _REPEAT_PENALTY
from sdk.providers.embedded._sampling import _TEMPERATURE
from sdk.providers.embedded._sampling import _TOP_K
from sdk.providers.embedded._sampling import _TOP_P
from sdk.providers.embedded._sampling import _call_settings
from sdk.providers.embedded._sampling import _check
from sdk.providers.embedded._sampling import _Settings
from sdk.providers.embedded._tools import ToolPlan
from sdk.schema.grounding import grounded_lark

if TYPE_CHECKING:
    from sdk.contract import Contract

__all__ = ["EMBEDDED", "EMBEDDED_WIRE", "EmbeddedProvider"]

# The engine is the SDK's own: it reports stop reasons in the SDK's vocabulary (no table), and
# masks tokens with the canonical schema's grammar (no dialect, nothing stripped).
EMBEDDED = register(
    Profile(
        name="embedded",
        display_name="embedded model",
        aliases=frozenset({"local"}),
        carries={
            "documents": "a grammar of the canonical schema, masking every token",
            "grammars": "Lark",
            "tools": "a grammar of the calls",
        },
        provider="sdk.providers.embedded:EmbeddedProvider",
    )
)
"""The embedded model's family: everything the SDK knows about it (`sdk.providers.profile`)."""

EMBEDDED_WIRE = WireProfile(
    EMBEDDED,
    None,
    target="embedded",
    grammar=True,
    tools=True,
    options={name: name for name in sorted(_CALL_OPTIONS)},
    raw_body=False,
)
"""What the in-process engine carries: documents, grammars (Lark), tool calls, and its sampling
options per call (`fast_forward` and `ignore_eos` too, through a `CompletionRequest`)."""


class EmbeddedProvider(Provider):
    """In-process llama.cpp with grammar masking (see the module docstring).

    `model`: a model by name, `"smollm2-135m"` (the default: SmolLM2-135M-Instruct, Q4_1, in the
    `local` extra) or `"gemma3-270m"` (Gemma 3 270M, pretrained, Q4_K_M, in the `gemma` extra),
    or the path of a GGUF file. A model whose GGUF has no chat template (a pretrained one) is
    given a completion-style prompt with an example instead of chat turns.
    `n_ctx`: context window in tokens (prompt plus output). `n_threads`: CPU threads for llama.cpp
    (default: `default_threads()`, half the CPUs). `temperature`, `top_p`, `top_k`, `seed`:
    sampling within the tokens the grammar allows; temperature 0 (the default) is greedy.
    `repeat_penalty`: llama.cpp's repetition penalty over the last 64 generated tokens (1.0: none).
    Each can also be passed per call (`client.generate(..., temperature=0.7)`), and so can
    `constrained` and, for unconstrained benchmark runs, `ignore_eos` (generate exactly
    `max_tokens` tokens).
    `constrained=False`: no mask at all (the unconstrained arm for comparisons).
    `grammar`: your own grammar (Lark text, or an llguidance grammar from `llguidance.grammar_from`)
    instead of the one compiled from the contract's schema; then no schema instruction is added
    to the prompt either. `low_mass_threshold`: a field whose lowest surviving mass is under it is
    flagged in the diagnostics. `schema_instruction`: whether to add the short description of the
    contract's fields to the system prompt (the model must know what each field means; the grammar
    only knows the form). `fast_forward=True` (per call too): decode the tokens the grammar forces
    (keys, punctuation) in one batch with the token before them instead of one forward pass each.
    Off by default: it gains at most about 1.1x here (bench row 6), and llama.cpp's batched pass
    is not bitwise equal to one-token passes, so at a near tie greedy text can differ from the
    token-by-token loop's; the forced tokens, their masks and the diagnostics' mass are the same.
    `grounding=True` (per call too): a `SourceQuote` or `Verbatim` string of a contract can only
    be a span of the call's `source` while decoding (`sdk.schema.grounding`), so a copied value
    cannot be garbled or invented; `False` leaves them to the parser's check after parsing;
    `"values"` grounds and writes every nullable copied value a span can fill (`null` only
    where none can): the first pass of mass-aware abstention (`sdk.abstention`).
    `engines`: how many generations run at once. One engine (the default) runs one generation
    at a time: calls made together (threads, `asyncio.gather`) queue for it, and the first one
    that waits logs a warning once. `engines=N` loads N copies of the model, each with its own
    llama.cpp context and `n_threads` threads, for N at once where memory and cores allow (the
    weights are memory-mapped and shared; each engine adds its context: measured in bench row
    30, calls/s and peak memory of 2 engines against 1).
    """

    def __init__(
        self,
        model: str | os.PathLike[str] | None = None,
        *,
        n_ctx: int = 4096,
        n_threads: int | None = None,
        temperature: float = _TEMPERATURE,
        top_p: float = _TOP_P,
        top_k: int = _TOP_K,
        repeat_penalty: float = _REPEAT_PENALTY,
        seed: int | None = None,
        constrained: bool = True,
        grammar: str | None = None,
        low_mass_threshold: float = DEFAULT_LOW_MASS_THRESHOLD,
        schema_instruction: bool = True,
        fast_forward: bool = False,
        grounding: bool | str = True,
        engines: int = 1,
    ) -> None:
        if n_ctx < 16:
            raise ValueError(f"n_ctx must be at least 16, not {n_ctx}")
        if not 0.0 <= low_mass_threshold <= 1.0:
            raise ValueError(f"low_mass_threshold must be within [0, 1], not {low_mass_threshold}")
        if grammar is not None and not constrained:
            raise ValueError("grammar= needs constrained=True")
        self._settings = _check(
            _Settings(
                temperature,
                top_p,
                top_k,
                repeat_penalty,
                seed,
                constrained,
                fast_forward=fast_forward,
                grounding=grounding,
            ),
            "EmbeddedProvider",
        )
        self.model_path = model_file(model)
        """The model's GGUF file."""
        self.n_ctx = n_ctx
        self.n_threads = n_threads if n_threads is not None else default_threads()
        self.grammar = grammar
        self.low_mass_threshold = low_mass_threshold
        self.schema_instruction = schema_instruction
        self.engines = engines
        self._pool: EnginePool | None = EnginePool(
            self.model_path, self.n_ctx, self.n_threads, engines
        )
        self.codec = InProcessCodec(EMBEDDED_WIRE, self._vet)

    def __repr__(self) -> str:
        mode = "constrained" if self._settings.constrained else "unconstrained"
        pool = f", engines={self.engines}" if self.engines > 1 else ""
        return f"EmbeddedProvider({self.model!r}, {mode}, n_ctx={self.n_ctx}{pool})"

    @property
    def model(self) -> str:
        """The model file's name without `.gguf` (e.g. `SmolLM2-135M-Instruct.Q4_1`)."""
        return Path(self.model_path).name.removesuffix(".gguf")

    def cache_scope(self) -> dict[str, Any]:
        # The model by its content (the GGUF file's sha256: the same file anywhere is the same
        # model, another file of the same name is not), every setting that changes what is
        # generated, and the threshold the replies' diagnostics flag fields under (on the
        # result: another threshold's flags are not this provider's).
        return {
            "provider": self.name,
            "model": file_digest(self.model_path),
            "settings": repr(self._settings),
            "grammar": self.grammar,
            "schema_instruction": self.schema_instruction,
            "n_ctx": self.n_ctx,
            "low_mass_threshold": self.low_mass_threshold,
        }

    @property
    def constrained(self) -> bool:
        """Whether calls mask the logits with the grammar (unless a call says otherwise)."""
        return self._settings.constrained

    def close(self) -> None:
        """Drop this provider's hold on the model (it is freed once no provider uses it); the next
        call loads it again."""
        self._pool = None

    async def aclose(self) -> None:
        self.close()

    def grammar_for(self, contract: type[Contract], *, source: str | None = None) -> str:
        """The llguidance grammar that constrains `contract`'s documents (compiled and checked
        once per contract): the contract's canonical schema in declared property order with
        bounded whitespace, or the `grammar=` given. With `source`, the grounded grammar a call
        with that source decodes under (`SourceQuote`/`Verbatim` strings confined to its spans),
        when the provider grounds and the contract has such strings."""
        custom = self.grammar
        if custom is None and source is not None and self._settings.grounding:
            request = CompletionRequest(JsonDocument(contract), (), 1, source=source)
            custom = grounding_plan(request, grounded_lark, engine="embedded").grammar
        return self._loaded().grammar(contract, custom)

    def grammar_accepts(
        self, contract: type[Contract], text: str, *, source: str | None = None
    ) -> bool:
        """Whether `text`, as this model tokenizes it, is a complete document of the grammar
        `contract` is generated under (with `source`: grounded in it, see `grammar_for`): for
        testing a grammar against accept and reject sets."""
        engine = self._loaded()
        return engine.accepts(self.grammar_for(contract, source=source), text)

    def prompt_for(self, request: CompletionRequest) -> str:
        """The prompt text the model sees: the conversation in the model's chat template, the
        schema instruction in the system turn."""
        return self._loaded().prompt(request, self._instruction(request))

    # --- calls ---

    # --- the transports: the decoding loop, through the drivers like any provider ---

    def transport(self) -> InProcessTransport:
        return InProcessTransport(lambda request: self._complete(request, None), self._stream)

    def atransport(self) -> AsyncInProcessTransport:
        return AsyncInProcessTransport(self._acomplete, self._astream)

    def _stream(self, request: CompletionRequest) -> Iterator[TextDelta | Completion]:
        """A `TextDelta` per token (whole characters only), then the `Completion`."""
        return self._run(request, None)

    async def _acomplete(self, request: CompletionRequest) -> Completion:
        """`complete` in a worker thread; cancelling the call stops generation at the next
        token."""
        cancel = threading.Event()
        try:
            return await asyncio.to_thread(self._complete, request, cancel)
        except asyncio.CancelledError:
            cancel.set()
            raise

    async def _astream(self, request: CompletionRequest) -> AsyncIterator[TextDelta | Completion]:
        """`stream` driven from a worker thread: deltas arrive as tokens are generated. Closing
        the iterator early (or cancelling) stops generation at the next token."""
        loop = asyncio.get_running_loop()
        queue: asyncio.Queue[TextDelta | Completion | BaseException | None] = asyncio.Queue()
        cancel = threading.Event()

        def put(item: TextDelta | Completion | BaseException | None) -> None:
            try:
                loop.call_soon_threadsafe(queue.put_nowait, item)
            except RuntimeError:  # the event loop is closed: nobody is listening any more
                cancel.set()

        def produce() -> None:
            try:
                for item in self._run(request, cancel):
                    put(item)
            except _Cancelled:
                pass
            except BaseException as error:  # handed to the consumer, raised there
                put(error)
            finally:
                put(None)

        worker = asyncio.ensure_future(asyncio.to_thread(produce))
        try:
            while (item := await queue.get()) is not None:
                if isinstance(item, BaseException):
                    raise item
                yield item
        finally:
            cancel.set()
            # Leave nothing running: wait for the worker to notice (at most one token's time).
            await asyncio.shield(worker)

    # --- the decoding loop ---

    def _complete(self, request: CompletionRequest, cancel: threading.Event | None) -> Completion:
        # `closing`: the loop holds the model's lock until the generator finishes or closes.
        with contextlib.closing(self._run(request, cancel)) as items:
            for item in items:
                if isinstance(item, Completion):
                    return item
        raise AssertionError("the decoding loop ended without a completion")  # pragma: no cover

    def _run(
        self, request: CompletionRequest, cancel: threading.Event | None
    ) -> Generator[TextDelta | Completion, None, None]:
        if isinstance(request.output, ToolOffer):
            # The tools rendered into the prompt, a lazy grammar, the text read back into calls
            # (`sdk.providers.embedded._tools`).
            plan = ToolPlan(request, request.output)
            yield from plan.read(self._decode(plan.request, cancel, plan.grammar))
            return
        yield from self._decode(request, cancel, None)

    def _decode(
        self, request: CompletionRequest, cancel: threading.Event | None, lark: str | None
    ) -> Generator[TextDelta | Completion, None, None]:
        settings = _check(_call_settings(self._settings, dict(request.options.items())), "options")
        contract, custom = self._constraint(request.output)
        custom = lark or custom
        constrained = settings.constrained and (contract is not None or custom is not None)
        plan = GroundingPlan()
        if constrained and custom is None and settings.grounding:
            build = _prefer_values if settings.grounding == "values" else grounded_lark
            plan = grounding_plan(request, build, engine="embedded")
            custom = plan.grammar
        with self._engines().hold(cancel) as engine:
            constraint = Constraint(
                grammar=engine.grammar(contract, custom) if constrained else None,
                json_text=contract is not None and self.grammar is None,
                threshold=self.low_mass_threshold,
            )
            instruction = self._instruction(request)
            for item in generate(
                engine, request, settings, constraint, instruction=instruction, cancel=cancel
            ):
                if isinstance(item, Completion) and plan.notes:
                    item = replace(item, notes=plan.notes)
                yield item

    def _constraint(self, output: Output) -> tuple[type[Contract] | None, str | None]:
        """What constrains the output: a JSON request the contract's grammar (or the provider's
        `grammar=`), a grammar request its Lark text, a free-text request nothing (a tool-call
        request is decoded as free text under its plan's grammar, `_run`)."""
        match output:
            case JsonDocument(contract):
                return contract, self.grammar
            case GrammarSentence(grammar):
                return None, grammar.lark
            case FreeText():
                return None, None
            case ToolOffer():
                raise TypeError("tool calls are decoded as free text under their plan's grammar")
            case unknown:
                assert_never(unknown)

    def _vet(self, request: CompletionRequest) -> None:
        """Refuse before generating: option values out of range, and images or documents (text
        only)."""
        _check(_call_settings(self._settings, dict(request.options.items())), "options")
        text_only(request, self.name)

    def _instruction(self, request: CompletionRequest) -> str | None:
        output = request.output
        if not self.schema_instruction or self.grammar is not None:
            return None
        return schema_instruction(output.schema) if isinstance(output, JsonDocument) else None

    def _loaded(self) -> _Engine:
        """The shared engine (grammars, prompts: what needs the model but not a context)."""
        return self._engines().first

    def _engines(self) -> EnginePool:
        if self._pool is None:
            self._pool = EnginePool(self.model_path, self.n_ctx, self.n_threads, self.engines)
        return self._pool


def _prefer_values(schema: dict[str, Any], source: str) -> str:
    return grounded_lark(schema, source, prefer_values=True)
