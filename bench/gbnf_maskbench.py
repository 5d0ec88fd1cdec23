"""GBNF converters against JSONSchemaBench's maskbench: schemas passing, invalid instances accepted.

    .venv/bin/python bench/gbnf_maskbench.py /tmp/maskbench/maskbench-sample
    .venv/bin/python bench/gbnf_maskbench.py DIR --limit 300 --causes     # refusal causes
    .venv/bin/python bench/run.py --only maskbench --write   # its section of RESULTS.md

Each corpus file is a JSON object with `schema` and `tests` (instances with `data` and `valid`).
A converter passes a schema when it converts it and classifies every instance right (a schema
without instances passes when it converts); what must stay zero is invalid instances accepted.

Converters, in the same run on the same files: `sdk.schema.gbnf.to_gbnf` and, as the baseline,
llama.cpp's own Python converter (`llama_cpp.llama_grammar.json_schema_to_gbnf`) when
llama-cpp-python is installed. A grammar's verdict on an instance comes from llama.cpp's own
grammar engine (`tests.grammar_support.llama_accepts`, the sampler llama.cpp decodes with) and,
with `--engine both` (the default), from llguidance as well (`grammar_accepts`): an instance
counts as accepted only when every engine that could load the grammar accepts it (none could:
rejected); disagreements and engines unable to load a grammar (llguidance stops at 65,535
grammar symbols) are counted apart.

How an instance is written: compact JSON, numbers as in the file (a float positionally where
that fits the converter's digit caps), strings with raw characters; a valid instance's object
keys in the order the converter writes them: declared order for ours, required properties
first for llama.cpp's (both then the others).
The reordering never changes whether an instance is valid (JSON Schema ignores key order), so
it cannot hide an invalid instance accepted.

Conversion time is wall time per schema (`time.perf_counter`); a schema that takes longer
than `--timeout` seconds is stopped and counted as failing. The machine is shared: times are
an upper bound.
"""

from __future__ import annotations

import argparse
import collections
import json
import math
import multiprocessing
import signal
import sys
import textwrap
import time
from collections.abc import Callable
from collections.abc import Iterator
from dataclasses import dataclass
from dataclasses import field
from decimal import Decimal
from pathlib import Path
from typing import Any

BENCH = Path(__file__).resolve().parent
ROOT = BENCH.parent
sys.path[:0] = [p for p in (str(ROOT), str(BENCH)) if p not in sys.path]

import jsonschema  # noqa: E402
from registry import Measured  # noqa: E402
from registry import Settings  # noqa: E402
from registry import row  # noqa: E402

from sdk.schema.gbnf import UnsupportedSchema  # noqa: E402
from sdk.schema.gbnf import to_gbnf  # noqa: E402

OURS = "sdk.schema.gbnf"
SCALING_SIZES = (250, 500, 1000, 2000)
"""Definitions in the synthetic schemas of the scaling table (each twice the one before)."""


class _Timeout(Exception):
    """A conversion ran past the time limit."""


@dataclass
class Tally:
    """One converter's figures over the corpus."""

    name: str
    schemas: int = 0
    converted: int = 0
    passing: int = 0
    invalid_accepted: int = 0
    schemas_with_invalid_accepted: int = 0
    valid_rejected: int = 0
    engine_disagreements: int = 0
    engine_errors: int = 0
    timeouts: int = 0
    times: list[float] = field(default_factory=list)
    causes: collections.Counter[str] = field(default_factory=collections.Counter)
    examples: dict[str, list[str]] = field(default_factory=lambda: collections.defaultdict(list))
    slowest: list[tuple[float, str, int]] = field(default_factory=list)

    def row(self) -> str:
        times = sorted(self.times)
        p95 = times[min(len(times) - 1, math.ceil(0.95 * len(times)) - 1)] if times else 0.0
        return (
            f"| {self.name} | {self.passing:,} of {self.schemas:,} | {self.invalid_accepted:,}"
            f" (in {self.schemas_with_invalid_accepted:,} schemas) | {self.converted:,} |"
            f" {self.valid_rejected:,} | {max(times, default=0.0):.2f} s | {p95 * 1000:.1f} ms |"
            f" {self.timeouts} | {self.engine_disagreements} | {self.engine_errors} |"
        )


HEADER = (
    "| converter | schemas passing | invalid instances accepted | converted |"
    " valid instances rejected | time max | time p95 | over limit | engines disagree |"
    " engine errors (instance checks) |\n"
    "|---|---|---|---|---|---|---|---|---|---|"
)


def corpus(directory: Path, limit: int | None, only: str | None) -> Iterator[Path]:
    files = sorted(directory.glob("*.json"))
    if only:
        files = [f for f in files if only in f.name]
    yield from files[:limit] if limit else files


# --- writing an instance ------------------------------------------------------------------


def positional(number: float) -> str:
    """A float without exponent when it fits 19 integer and 20 fraction digits, else repr."""
    if not math.isfinite(number):
        return json.dumps(number)  # NaN/Infinity: not JSON, rejected by every grammar
    if number == 0:
        return "-0.0" if math.copysign(1, number) < 0 else "0.0"
    text = format(Decimal(repr(number)), "f")
    whole, _, fraction = text.lstrip("-").partition(".")
    if len(whole) <= 19 and len(fraction) <= 20:
        return text if "." in text else text + ".0"
    return repr(number)


def render(value: Any) -> str:
    if isinstance(value, dict):
        return "{" + ",".join(f"{render(k)}:{render(v)}" for k, v in value.items()) + "}"
    if isinstance(value, list):
        return "[" + ",".join(render(item) for item in value) + "]"
    if isinstance(value, float):
        return positional(value)
    if isinstance(value, str):
        try:
            json.dumps(value, ensure_ascii=False).encode()
        except UnicodeEncodeError:  # a lone surrogate: only its escape is JSON
            return json.dumps(value)
        return json.dumps(value, ensure_ascii=False)
    return json.dumps(value)


class Orderer:
    """Puts an instance's keys in the order the schema declares them (recursively)."""

    def __init__(self, root: Any, *, required_first: bool = False) -> None:
        self.root = root
        self.required_first = required_first  # llama.cpp's converter writes required ones first
        try:
            cls = jsonschema.validators.validator_for(root, jsonschema.Draft202012Validator)
            self.validator: Any = cls(root)
        except Exception:  # an unusable schema: keep the keys as they are
            self.validator = None

    def deref(self, node: Any) -> Any:
        for _ in range(32):
            if not (isinstance(node, dict) and isinstance(node.get("$ref"), str)):
                return node
            ref = node["$ref"]
            if not ref.startswith("#"):
                return node
            target: Any = self.root
            for token in [t for t in ref[1:].split("/") if t]:
                token = token.replace("~1", "/").replace("~0", "~")
                if isinstance(target, dict) and token in target:
                    target = target[token]
                elif isinstance(target, list) and token.isdigit() and int(token) < len(target):
                    target = target[int(token)]
                else:
                    return node
            node = target
        return node

    def valid(self, node: Any, value: Any) -> bool:
        if self.validator is None:
            return False
        try:
            return bool(self.validator.evolve(schema=node).is_valid(value))
        except Exception:
            return False

    def members(self, node: Any, value: Any, depth: int = 0) -> list[Any]:
        """The subschemas whose `properties`/`items` apply to `value`: the node itself, its
        `$ref` target, `allOf` members, and the first `anyOf`/`oneOf` branch that matches."""
        node = self.deref(node)
        if not isinstance(node, dict) or depth > 16:
            return []
        out = [node]
        for member in node.get("allOf", []) if isinstance(node.get("allOf"), list) else []:
            out += self.members(member, value, depth + 1)
        if "$ref" in node and self.deref({"$ref": node["$ref"]}) is not node:
            out += self.members({"$ref": node["$ref"]}, value, depth + 1)
        for keyword in ("anyOf", "oneOf"):
            options = node.get(keyword)
            if isinstance(options, list):
                for option in options:
                    if self.valid(option, value):
                        out += self.members(option, value, depth + 1)
                        break
        return out

    def order(self, node: Any, value: Any, depth: int = 0) -> Any:
        if depth > 200 or not isinstance(value, dict | list):
            return value
        members = self.members(node, value)
        if isinstance(value, list):
            ordered = []
            for index, item in enumerate(value):
                sub: Any = True
                for member in members:
                    prefix = member.get("prefixItems")
                    if isinstance(prefix, list) and index < len(prefix):
                        sub = prefix[index]
                        break
                    if isinstance(member.get("items"), dict):
                        sub = member["items"]
                        break
                ordered.append(self.order(sub, item, depth + 1))
            return ordered
        declared: dict[str, Any] = {}
        for member in members:
            properties = member.get("properties")
            if isinstance(properties, dict):
                for name, sub in properties.items():
                    declared.setdefault(name, sub)
        if self.required_first:
            required = {
                name
                for member in members
                if isinstance(member.get("required"), list)
                for name in member["required"]
                if isinstance(name, str)
            }
            declared = {
                **{n: v for n, v in declared.items() if n in required},
                **{n: v for n, v in declared.items() if n not in required},
            }
        result = {}
        for name, sub in declared.items():
            if name in value:
                result[name] = self.order(sub, value[name], depth + 1)
        for name, item in value.items():
            if name not in result:
                extra: Any = True
                for member in members:
                    if isinstance(member.get("additionalProperties"), dict):
                        extra = member["additionalProperties"]
                        break
                result[name] = self.order(extra, item, depth + 1)
        return result


# --- engines --------------------------------------------------------------------------------


def _engine_worker(name: str, conn: Any) -> None:
    """Runs in a child process: answers (grammar, text) with True/False or an error text."""
    sys.path.insert(0, str(ROOT))
    from tests import grammar_support

    accepts = (
        grammar_support.llama_accepts if name == "llama.cpp" else grammar_support.grammar_accepts
    )
    while True:
        try:
            grammar, text = conn.recv()
        except EOFError:
            return
        try:
            conn.send(bool(accepts(grammar, text)))
        except Exception as error:  # the engine refuses the grammar
            conn.send(f"{type(error).__name__}: {error}"[:200])


class IsolatedEngine:
    """One grammar engine in a child process, restarted when it crashes (llama.cpp's grammar
    code can take the process down on some grammars) or hangs past `timeout` seconds."""

    def __init__(self, name: str, timeout: float = 120.0) -> None:
        self.name = name
        self.timeout = timeout
        self.crashes = 0
        self.process: Any = None
        self.conn: Any = None

    def start(self) -> None:
        context = multiprocessing.get_context("spawn")
        self.conn, child = context.Pipe()
        self.process = context.Process(target=_engine_worker, args=(self.name, child), daemon=True)
        self.process.start()
        child.close()

    def stop(self) -> None:
        if self.process is not None:
            self.process.kill()
            self.process.join()
            self.process = None

    def __call__(self, grammar: str, text: str) -> bool:
        if self.process is None:
            self.start()
        self.conn.send((grammar, text))
        if not self.conn.poll(self.timeout):
            self.crashes += 1
            self.stop()
            raise RuntimeError(f"{self.name} did not answer in {self.timeout:.0f} s")
        try:
            answer = self.conn.recv()
        except EOFError:
            self.crashes += 1
            self.stop()
            raise RuntimeError(f"{self.name} crashed") from None
        if isinstance(answer, str):
            raise RuntimeError(answer)
        return bool(answer)


def engines(choice: str) -> list[tuple[str, Callable[[str, str], bool]]]:
    out: list[tuple[str, Callable[[str, str], bool]]] = []
    if choice in ("llama.cpp", "both"):
        out.append(("llama.cpp", IsolatedEngine("llama.cpp")))
    if choice in ("llguidance", "both"):
        out.append(("llguidance", IsolatedEngine("llguidance")))
    return out


def baseline_converter() -> Callable[[dict[str, Any]], str] | None:
    try:
        from llama_cpp.llama_grammar import json_schema_to_gbnf
    except ImportError:
        return None

    def convert(schema: dict[str, Any]) -> str:
        return str(json_schema_to_gbnf(json.dumps(schema)))

    return convert


def ours(schema: dict[str, Any]) -> str:
    return to_gbnf(schema)


# --- the run --------------------------------------------------------------------------------


def _alarm(signum: int, frame: Any) -> None:
    raise _Timeout


def cause_of(error: BaseException) -> list[str]:
    if isinstance(error, UnsupportedSchema):
        found = []
        for problem in error.problems:
            reason = problem.reason
            if reason.startswith("unknown keyword"):
                reason = "unknown keyword"
            elif reason.startswith("format "):
                reason = reason.split(" (supported")[0]
            elif reason.startswith("pattern not expressible"):
                reason = "pattern: " + reason.split(": ", 2)[-1][:60]
            found.append(f"{problem.keyword}: {reason}"[:110])
        return sorted(set(found))
    return [f"{type(error).__name__}: {str(error)[:80]}"]


def run_one(
    tally: Tally,
    convert: Callable[[dict[str, Any]], str],
    path: Path,
    doc: dict[str, Any],
    checks: list[tuple[str, Callable[[str, str], bool]]],
    timeout: float,
) -> None:
    schema, tests = doc["schema"], doc.get("tests", [])
    tally.schemas += 1
    signal.setitimer(signal.ITIMER_REAL, timeout)
    start = time.perf_counter()
    try:
        grammar = convert(schema)
    except _Timeout:
        tally.timeouts += 1
        tally.causes["over the time limit"] += 1
        tally.times.append(time.perf_counter() - start)
        return
    except Exception as error:  # a refusal (ours) or a crash (either)
        tally.times.append(time.perf_counter() - start)
        for cause in cause_of(error):
            tally.causes[cause] += 1
            if len(tally.examples[cause]) < 5:
                tally.examples[cause].append(path.name)
        return
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
    elapsed = time.perf_counter() - start
    tally.times.append(elapsed)
    tally.slowest = sorted([*tally.slowest, (elapsed, path.name, len(json.dumps(schema)))])[-5:]
    tally.converted += 1
    orderer = Orderer(schema, required_first=tally.name != OURS)
    ok = True
    invalid_accepted = 0
    for test in tests:
        data = test["data"]
        text = render(orderer.order(schema, data) if test["valid"] else data)
        verdicts = []
        for engine, accepts in checks:
            try:
                verdicts.append(bool(accepts(grammar, text)))
            except Exception as error:  # the engine cannot load the grammar, or crashed
                tally.engine_errors += 1
                if len(tally.examples[f"{engine} cannot load"]) < 10:
                    tally.examples[f"{engine} cannot load"].append(f"{path.name} ({error})"[:160])
        if not verdicts:
            verdicts.append(False)  # no engine could decide: counted as rejected
        if len(set(verdicts)) > 1:
            tally.engine_disagreements += 1
            if len(tally.examples["engines disagree"]) < 10:
                tally.examples["engines disagree"].append(path.name)
        accepted = all(verdicts)
        if accepted != test["valid"]:
            ok = False
            if accepted:
                invalid_accepted += 1
            else:
                tally.valid_rejected += 1
                if len(tally.examples["valid rejected"]) < 20:
                    tally.examples["valid rejected"].append(path.name)
    if invalid_accepted:
        tally.invalid_accepted += invalid_accepted
        tally.schemas_with_invalid_accepted += 1
        if len(tally.examples["invalid accepted"]) < 20:
            tally.examples["invalid accepted"].append(path.name)
    if ok:
        tally.passing += 1
    else:
        tally.causes["misclassified an instance"] += 1


def synthetic_schema(count: int) -> dict[str, Any]:
    """`count` definitions, each with what used to cost a validator check per node (an enum
    beside other keywords), an `allOf`, keywords beside `anyOf`, and references (the one to the
    next definition makes a chain as long as the schema)."""
    defs = {}
    for i in range(count):
        defs[f"D{i}"] = {
            "type": "object",
            "properties": {
                "kind": {"type": "string", "enum": ["a", "bb", "ccc", "dddd"], "maxLength": 3},
                "size": {"type": "integer", "minimum": i, "maximum": i + 1000},
                "base": {"$ref": f"#/definitions/B{i % 7}"},
                "both": {
                    "allOf": [
                        {"type": "object", "properties": {"tag": {"type": "string"}}},
                        {"required": ["tag"]},
                    ]
                },
                "either": {
                    "type": "string",
                    "anyOf": [{"type": "string", "minLength": 2}, {"const": "x"}],
                },
                "next": {"$ref": f"#/definitions/D{(i + 1) % count}"},
            },
            "required": ["kind"],
        }
    for j in range(7):
        defs[f"B{j}"] = {"type": "object", "properties": {"tag": {"type": "string"}}}
    # The reference at the top sits in a property: llama.cpp's converter does not resolve the
    # references inside `definitions` when the root itself is a `$ref`.
    return {
        "definitions": defs,
        "type": "object",
        "properties": {"first": {"$ref": "#/definitions/D0"}},
        "required": ["first"],
    }


def scaling(converters: list[tuple[str, Callable[[dict[str, Any]], str]]]) -> list[str]:
    """Conversion time of a schema and of the same schema twice and four times as large."""
    lines = [
        "",
        "| converter | schema size | time (best of 3) | growth per doubling |",
        "|---|---|---|---|",
    ]
    for name, convert in converters:
        previous = None
        for count in SCALING_SIZES:
            schema = synthetic_schema(count)
            size = len(json.dumps(schema)) / 1000
            best = math.inf
            try:
                for _ in range(3):
                    start = time.perf_counter()
                    convert(schema)
                    best = min(best, time.perf_counter() - start)
            except Exception as error:  # a refusal or a crash is a result too
                lines.append(f"| {name} | {size:,.0f} KB | fails: {type(error).__name__} | |")
                previous = None
                continue
            growth = f"{best / previous:.2f}" if previous else ""
            lines.append(f"| {name} | {size:,.0f} KB | {best * 1000:,.1f} ms | {growth} |")
            previous = best
    return lines


Converter = tuple[str, Callable[[dict[str, Any]], str]]


def run_corpus(
    directory: Path,
    *,
    limit: int | None = None,
    only: str | None = None,
    engine: str = "both",
    baseline: bool = True,
    timeout: float = 30.0,
) -> tuple[list[Tally], list[Converter], list[str]]:
    """Every converter over the corpus: the tallies, the converters, and the engines used."""
    if not directory.is_dir():
        raise FileNotFoundError(
            f"no maskbench corpus at {directory} (extract maskbench-sample.tar.gz there, or "
            "pass --maskbench DIR / set MASKBENCH)"
        )
    checks = engines(engine)
    converters: list[Converter] = [(OURS, ours)]
    other = baseline_converter() if baseline else None
    if other is not None:
        converters.append(("llama.cpp's converter", other))
    tallies = [Tally(name) for name, _ in converters]
    signal.signal(signal.SIGALRM, _alarm)
    started = time.perf_counter()
    try:
        for count, path in enumerate(corpus(directory, limit, only), 1):
            doc = json.loads(path.read_text())
            for tally, (_, convert) in zip(tallies, converters, strict=True):
                run_one(tally, convert, path, doc, checks, timeout)
            if count % 500 == 0:
                print(f"... {count} files, {time.perf_counter() - started:.0f} s", file=sys.stderr)
    finally:
        for _, engine_check in checks:
            if isinstance(engine_check, IsolatedEngine):
                engine_check.stop()
    return tallies, converters, [name for name, _ in checks]


def table_lines(directory: Path, tallies: list[Tally], engines_used: list[str]) -> list[str]:
    return [
        f"Corpus: {directory.name} ({tallies[0].schemas:,} schemas); verdicts from "
        f"{' and '.join(engines_used)}.",
        "",
        HEADER,
        *(tally.row() for tally in tallies),
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("corpus", type=Path, help="the extracted maskbench directory")
    parser.add_argument("--limit", type=int, help="only the first N files (sorted by name)")
    parser.add_argument("--only", help="only files whose name contains this")
    parser.add_argument("--engine", choices=["llama.cpp", "llguidance", "both"], default="both")
    parser.add_argument("--no-baseline", action="store_true", help="skip llama.cpp's converter")
    parser.add_argument("--timeout", type=float, default=30.0, help="seconds per conversion")
    parser.add_argument("--causes", action="store_true", help="print refusal causes")
    parser.add_argument(
        "--scaling", action="store_true", help="also time synthetic schemas of doubling size"
    )
    args = parser.parse_args()
    tallies, converters, engines_used = run_corpus(
        args.corpus, limit=args.limit, only=args.only, engine=args.engine,
        baseline=not args.no_baseline, timeout=args.timeout,
    )  # fmt: skip
    lines = table_lines(args.corpus, tallies, engines_used)
    if args.scaling:
        lines += scaling(converters)
    print("\n".join(lines))
    for tally in tallies:
        print(f"\n{tally.name}: slowest {tally.slowest}")
        if args.causes:
            print(f"{tally.name}: failure causes (a schema may have several)")
            for cause, number in tally.causes.most_common(40):
                print(f"  {number:6}  {cause}   e.g. {' '.join(tally.examples[cause][:3])}")
            for key in (
                "valid rejected",
                "invalid accepted",
                "engines disagree",
                "llama.cpp cannot load",
                "llguidance cannot load",
            ):
                print(f"  {key}: {' '.join(tally.examples[key])}")


WHOLE_CORPUS = 11_305  # maskbench's schemas; the sample in ../shared/data holds about half

NOTES = f"""\
- Passing: converted, every valid instance accepted and every invalid one rejected, by both
  engines (llama.cpp's grammar sampler and llguidance; an engine that cannot load a grammar
  leaves the verdict to the other). Valid instances are written with their keys in the order
  the converter writes them. Ours refuses loudly what it cannot write exactly; it may write
  less than the schema allows (documented narrowings), which shows as valid instances rejected,
  never as invalid ones accepted.
- The baseline is llama-cpp-python's Python port of llama.cpp's converter
  (`llama_cpp.llama_grammar.json_schema_to_gbnf`), not the server's C++ one: some of its
  grammars do not parse in llama.cpp (escapes such as `\\.`), and it types `{{}}` as an object.
- Time: wall time per conversion on a shared machine (other jobs running), so an upper bound.
  The scaling table converts a synthetic schema of {SCALING_SIZES[0]:,} to
  {SCALING_SIZES[-1]:,} chained definitions: growth per doubling near 2.0 is linear.
  llama.cpp's converter recurses along `$ref` chains, and a RecursionError there is its result.
"""


def goal_lines(tally: Tally, whole: int = WHOLE_CORPUS) -> list[str]:
    share = tally.passing / tally.schemas if tally.schemas else 0.0
    longest = max(tally.times, default=0.0)
    line = (
        f"{tally.name}: {tally.passing:,} of {tally.schemas:,} schemas pass ({share:.1%});"
        f" the same share of the whole corpus would be about {share * whole:,.0f} of"
        f" {whole:,} (goal >= 9,000; measured on this part only, extrapolated); invalid"
        f" instances accepted: {tally.invalid_accepted} (goal 0); longest conversion"
        f" {longest:.2f} s (goal < 5 s)."
    )
    return textwrap.wrap(line, 100, initial_indent="- ", subsequent_indent="  ",
                         break_long_words=False, break_on_hyphens=False)  # fmt: skip


@row("maskbench", number="12", title="GBNF converters on maskbench",
     measures="`sdk.schema.gbnf` and llama.cpp's converter over the maskbench corpus: schemas "
              "passing, invalid instances accepted (llama.cpp's and llguidance's verdicts); "
              "conversion time against schema size",
     unit="counts of schemas and instances; wall time per conversion (an upper bound)",
     long=True)  # fmt: skip
def maskbench_row(settings: Settings) -> Measured:
    directory = settings.maskbench or Path("maskbench-sample")
    tallies, converters, engines_used = run_corpus(
        directory, limit=40 if settings.quick else None
    )
    lines = [
        *goal_lines(tallies[0]),
        "",
        *table_lines(directory, tallies, engines_used),
        *scaling(converters),
    ]
    ours_tally = tallies[0]
    values = {
        "passing": ours_tally.passing,
        "schemas": ours_tally.schemas,
        "invalid_accepted": ours_tally.invalid_accepted,
    }
    return Measured([], notes=NOTES, section="\n".join(lines), values=values)


if __name__ == "__main__":
    main()
