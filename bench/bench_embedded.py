"""Embedded provider speed: grammar-constrained decoding against the same model unconstrained.

    .venv/bin/python bench/bench_embedded.py        # prints the figures
    (and row 6 of `make bench`)

Both arms run the same loop of `EmbeddedProvider` (llama.cpp logits, choice, decode) on the same
prompt; the constrained arm also fills llguidance's token bitmask, measures the surviving mass
and advances the grammar at every token. For each pair, the constrained arm writes a whole
`Decision` (sampled, one seed per pair, so the pairs differ), then the unconstrained arm writes
exactly as many tokens (`ignore_eos`), so both decode the same number of tokens from the same
context length, one right after the other. The figure is tokens over wall time for the whole
`complete()` call; the prompt's KV cache is reused between calls, so prompt evaluation (one
token) is not what is measured.

Goal (issue 4): constrained at >= 0.9x the unconstrained tokens/s. For comparison, llama.cpp's
own grammar path was measured at 0.57x in-process and 0.80x in llama-server.
"""

from __future__ import annotations

import statistics
import sys
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from contracts import Decision  # noqa: E402
from sdk.providers import Completion, CompletionRequest, Message  # noqa: E402

GOAL = 0.9
PROMPT = (
    "Expense request: USD 4,800 for a first-class flight to a one-day internal meeting. "
    "Policy: flights above USD 1,500 need VP sign-off; none is attached. Decide."
)


@dataclass(frozen=True)
class EmbeddedSpeed:
    """Tokens per second of the two arms, over every pair of the run."""

    constrained: float
    """Constrained tokens/s: all constrained tokens over all constrained wall time."""
    unconstrained: float
    """Unconstrained tokens/s, the same way."""
    paired_median: float
    """Median over the pairs of (constrained tokens/s) / (unconstrained tokens/s)."""
    tokens: int
    """Tokens generated per arm over the run."""
    pairs: int
    model: str
    threads: int

    @property
    def ratio(self) -> float:
        """Constrained over unconstrained tokens/s."""
        return self.constrained / self.unconstrained


def measure(pairs: int = 10, *, temperature: float = 0.7) -> EmbeddedSpeed:
    """Run `pairs` constrained/unconstrained pairs on one prompt and return the figures."""
    from sdk.providers.embedded import EmbeddedProvider

    provider = EmbeddedProvider()
    messages = (Message("user", PROMPT),)

    def run(max_tokens: int, seed: int, constrained: bool) -> tuple[int, float]:
        options = {"temperature": temperature, "seed": seed, "constrained": constrained}
        if not constrained:
            options["ignore_eos"] = True
        request = CompletionRequest(Decision, messages, max_tokens, options=options)
        started = time.perf_counter()
        completion: Completion = provider.complete(request)
        return completion.usage.output_tokens, time.perf_counter() - started

    run(16, 0, True)  # warm-up: grammar compiled, prompt in the KV cache
    totals = {True: [0, 0.0], False: [0, 0.0]}
    ratios = []
    for seed in range(1, pairs + 1):
        # The constrained document's own length (up to 160 tokens) sets the pair's count; the
        # unconstrained arm runs right after it, so both see the machine in the same state.
        timed = {True: run(160, seed, True)}
        timed[False] = run(timed[True][0], seed, False)
        for constrained, (count, elapsed) in timed.items():
            totals[constrained][0] += count
            totals[constrained][1] += elapsed
        ratios.append((timed[True][0] / timed[True][1]) / (timed[False][0] / timed[False][1]))
    constrained_tps = totals[True][0] / totals[True][1]
    unconstrained_tps = totals[False][0] / totals[False][1]
    return EmbeddedSpeed(
        constrained=constrained_tps,
        unconstrained=unconstrained_tps,
        paired_median=statistics.median(ratios),
        tokens=int(totals[True][0]),
        pairs=pairs,
        model=provider.model,
        threads=provider.n_threads,
    )


def main() -> None:
    speed = measure()
    print(
        f"{speed.model}, {speed.threads} thread(s), {speed.pairs} pairs, "
        f"{speed.tokens} tokens per arm\n"
        f"constrained   {speed.constrained:6.1f} tokens/s\n"
        f"unconstrained {speed.unconstrained:6.1f} tokens/s\n"
        f"ratio {speed.ratio:.2f}x (paired median {speed.paired_median:.2f}x; goal >= {GOAL}x)"
    )


if __name__ == "__main__":
    main()
