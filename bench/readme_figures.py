"""The README's performance and eval figures, written from bench/results.json and checked.

    .venv/bin/python bench/readme_figures.py --write    # the README's blocks and RESULTS.md,
                                                        # rendered again (nothing measured)
    .venv/bin/python bench/readme_figures.py --check    # in `make test`: exit 1 on any mismatch

Each generated block of README.md sits between two markers:

    <!-- figures:NAME (bench/readme_figures.py writes this from bench/results.json) -->
    ...
    <!-- /figures:NAME -->

`bench/run.py --write` calls `write()` after recording its rows, so a figure in the README is
always one a bench run produced. Pages of docs/ may hold blocks too (`GUIDES`: the "Scale out"
guide's model of a large fleet, from rows 21-23); `write_guides()` writes them and `--check`
checks them the same way. `--check` fails when:

- a block is not what the results render to (a figure edited by hand, or results newer than
  the README);
- bench/RESULTS.md is not what bench/results.json renders to (the page edited by hand);
- a row the README quotes was measured with `--quick` (a smoke run, not a result);
- eval-results/ holds runs the results' eval summary (row 13) has not read;
- the sections the blocks live in hold a figure outside them (a ratio, a percentage, a time or
  a size typed by hand).
"""

from __future__ import annotations

import argparse
import re
import sys
import textwrap
from collections.abc import Callable
from pathlib import Path
from typing import Any

BENCH = Path(__file__).resolve().parent
ROOT = BENCH.parent
sys.path[:0] = [p for p in (str(ROOT), str(BENCH)) if p not in sys.path]

import results  # noqa: E402
from results import RowRecord  # noqa: E402

__all__ = [
    "GUIDES",
    "README",
    "blocks",
    "check",
    "problems",
    "stray_figures",
    "with_blocks",
    "write",
    "write_guides",
]

README = ROOT / "README.md"
_OPEN = "<!-- figures:{name} (bench/readme_figures.py writes this from bench/results.json) -->"
_CLOSE = "<!-- /figures:{name} -->"
_BLOCK = re.compile(
    r"<!-- figures:(?P<name>[\w-]+) \(bench/readme_figures\.py writes this from "
    r"bench/results\.json\) -->\n(?P<body>.*?)<!-- /figures:(?P=name) -->",
    re.DOTALL,
)
# A figure: a ratio, a percentage (not a confidence level), a time, a size, a rate.
_FIGURE = re.compile(
    r"\b\d[\d,]*(\.\d+)?(x\b|\s?%(?!\s*(Wilson|interval|CI|bootstrap|\]))|\s?(ms|us|s|seconds?|"
    r"minutes?|MB|KB|GB|tokens/s|items/s)\b)"
)


class _Quoted:
    """The records a block quotes from, and which rows it quoted (to refuse `--quick` ones)."""

    def __init__(self, records: dict[str, RowRecord]) -> None:
        self.records = records
        self.rows: set[str] = set()

    def line(self, row: str, key: str, *, detail: bool = False) -> str:
        """The figure of the line `key` of `row` (and its detail), or that it is missing."""
        self.rows.add(row)
        found = self.records.get(row)
        if found is None or found.error:
            return "not measured yet"
        for line in found.lines:
            if line.key == key:
                return f"{line.figure}, {line.detail}" if detail else line.figure
        return "not measured"

    def values(self, row: str) -> dict[str, Any] | None:
        self.rows.add(row)
        found = self.records.get(row)
        if found is None or found.error or not found.values:
            return None
        return found.values


# --- the blocks ---


def _demo(quoted: _Quoted) -> str:
    values = quoted.values("demo")
    if values is None:
        return "Its duration is row 10 of `bench/RESULTS.md` (not measured yet).\n"
    return (
        _fill(
            f"It took {values['wall']:.0f} s from start to end on the bench's machine (row 10 of "
            "`bench/RESULTS.md`, with the date and commit it was measured at)."
        )
        + "\n"
    )


def _fill(text: str) -> str:
    """A paragraph wrapped as the README's prose is (100 columns)."""
    return textwrap.fill(text, 100, break_long_words=False, break_on_hyphens=False)


def _performance(quoted: _Quoted) -> str:
    line = quoted.line
    stream = quoted.values("streaming") or {}
    streamed = (
        f"{stream['size_kb']} KB list-heavy document in {stream['chunk']}-character chunks"
        if stream
        else "list-heavy document"
    )
    if stream.get("reader"):  # which build of the reader row 2 timed (`make` compiles it)
        streamed += f", reader {stream['reader']}"
    calls = (quoted.values("fan-out") or {}).get("calls")
    batch = quoted.values("batch")
    memory = (
        f"peak memory {batch['rss_mb']} MB at {batch['items']:,} items and "
        f"{batch['small_rss_mb']} MB at {batch['small_items']:,}"
        if batch
        else "peak memory: not measured yet"
    )
    bullets = [
        "the full `sdk.parse` against bare `model_validate_json`, 5 KB invoice: "
        f"{line('parse', 'parse-5kb')} (row 1);",
        f"streaming partial objects against one parse, {streamed}: "
        f"{line('streaming', 'stream-list')}; time "
        f"growth from half the size: {line('streaming', 'stream-growth', detail=True)} (2.0 is "
        "linear; row 2);",
        f"{f'{calls:,} ' if calls else ''}concurrent calls against bare httpx: "
        f"{line('fan-out', 'fanout')}; with "
        "the provider's defaults, which learn the chat template once: "
        f"{line('fan-out', 'fanout-defaults')} (row 3);",
        "a retry's input against the first request's, estimated tokens: "
        f"{line('retry-cost', 'retry-prose')}; for a list-heavy reply "
        f"{line('retry-cost', 'retry-list-heavy')}, instructor's "
        f"{line('retry-cost', 'retry-list-heavy-instructor')} (row 4);",
        "schema compile cold against cached, InvoiceExtraction: "
        f"{line('compile', 'compile-invoiceextraction')} (row 5);",
        "constrained against unconstrained tokens/s: embedded, Decision, "
        f"{line('embedded', 'embedded-decision')} (row 6); llama-server with our GBNF, "
        f"{line('llama-server', 'llama-grammar')} (row 7);",
        "a batch job on the local path against a bare httpx fan-out, items/s: "
        f"{line('batch', 'batch')}; {memory} (row 9).",
    ]
    intro = _fill(
        "`make bench` runs every row of the bench and writes `bench/RESULTS.md` (each row with "
        "the date and the commit it was measured at) and the figures below; each is a ratio of "
        "two quantities measured in the same run, in the unit its row names:"
    )
    items = [
        textwrap.fill(bullet, 100, initial_indent="- ", subsequent_indent="  ",
                      break_long_words=False, break_on_hyphens=False)
        for bullet in bullets
    ]  # fmt: skip
    return intro + "\n\n" + "\n".join(items) + "\n"


def _share(count: int, total: int) -> str:
    return f"{count} of {total}"


def _eval(quoted: _Quoted) -> str:
    values = quoted.values("eval")
    runs: dict[str, Any] = values["runs"] if values else {}
    decisions, invoices = runs.get("decisions"), runs.get("invoices")
    if decisions is None:
        return "The eval summary is row 13 of `bench/RESULTS.md` (not written yet).\n"
    parts = [_fill(_eval_setup(decisions, invoices)), "", decisions["table"], ""]
    parts.append(
        f"![Accuracy per arm, {decisions['items']} decisions, {decisions['model']}]"
        f"({decisions['folder']}/accuracy.svg)"
    )
    parts += ["", _fill(_eval_reading(decisions, invoices))]
    notices = runs.get("notices")
    if notices is not None:
        parts += ["", _notices(notices, runs.get("notices-calibration"))]
    return "\n".join(parts) + "\n"


# Issue 23's goals for grounded values and abstention, which the notices reading measures
# each arm against.
_EXACT_COPY_GOAL = 0.90
_RECALL_GOAL = 0.80
_FALSE_ABSTENTION_BOUND = 0.05


def _notices(run: dict[str, Any], calibration: dict[str, Any] | None) -> str:
    """The abstention eval: its setup, tables, chart, per-field counts and which mechanism
    `abstention="guided"` uses, with the figures that say why."""
    arms = run["arms"]
    calibrated = (
        f"the {calibration['items']} notices of `{calibration['dataset']}` "
        f"(`{calibration['folder']}/`), not on these"
        if calibration
        else "no calibration run committed"
    )
    setup = _fill(
        f"Abstention and grounded values: `{run['folder']}/` runs {run['items']} shipping "
        f"notices of `{run['dataset']}` through {len(arms)} arms (`{run['contract']}`: each "
        f"field `Verbatim | None`; {run['null_labels']} of the {run['labels']} labels are `null`, "
        "the notice does not state them), same model and settings. The mass-aware thresholds "
        f"were calibrated on {calibrated}."
    )
    parts = [setup, "", run["table"], ""]
    parts.append(
        f"![Accuracy per arm, {run['items']} notices, {run['model']}]({run['folder']}/accuracy.svg)"
    )
    parts += ["", _fill(
        "Per field, stated: right (a copied value copied exactly) of stated; absent: "
        "abstained of absent; false: abstained where stated."
    ), "", _field_table(arms)]  # fmt: skip
    parts += ["", _fill(_guided_reading(run))]
    return "\n".join(parts)


def _field_table(arms: dict[str, Any]) -> str:
    names = list(next(iter(arms.values()))["fields"]) if arms else []
    lines = [
        "| arm | " + " | ".join(f"{name}: stated / absent / false" for name in names) + " |",
        "| --- |" + " ---: |" * len(names),
    ]
    for arm, found in arms.items():
        cells = [
            f"{f['right']}/{f['stated']} / {f['abstained']}/{f['absent']} / "
            f"{f['false']}/{f['stated']}"
            for f in (found["fields"][name] for name in names)
        ]
        lines.append(f"| {arm} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def _rate(found: dict[str, Any], key: str) -> float:
    value = found.get(key)
    return float(value["estimate"]) if value else 0.0


def _guided_reading(run: dict[str, Any]) -> str:
    arms = run["arms"]
    sentences = []
    better = [
        p for p in run["pairs"]
        if p["a"] == "constrained" and p["significant"] and p["difference"] > 0
    ]  # fmt: skip
    for pair in better:
        found = arms[pair["b"]]
        sentences.append(
            f"`{pair['b']}` is more accurate than `constrained` ({pair['difference'] * 100:+.0f} "
            f"points, p = {pair['p_value']:.2g}) with false abstention "
            f"{_rate(found, 'false_abstention'):.0%}."
        )
    if not better:
        sentences.append("No arm is significantly more accurate than `constrained` on these items.")
    for arm in ("grounded", "evidence_gated", "presence_first"):
        found = arms.get(arm)
        if found is None:
            continue
        sentences.append(
            f"`{arm}`: valid {_share(found['valid'], found['items'])}, abstention recall "
            f"{_rate(found, 'abstention_recall'):.0%} at false abstention "
            f"{_rate(found, 'false_abstention'):.0%}."
        )
    guided, mass = arms.get("guided"), arms.get("mass_aware")
    if guided is not None and mass is not None:
        sentences.append(
            f'The client\'s own `abstention="guided"` (arm `guided`) gets '
            f"{_share(guided['correct'], guided['items'])} items right against "
            f"{_share(mass['correct'], mass['items'])} for `mass_aware`."
        )
    chosen = guided or mass
    if chosen is not None:
        copy, recall = _rate(chosen, "exact_copy"), _rate(chosen, "abstention_recall")
        false = _rate(chosen, "false_abstention")

        def verdict(met: bool) -> str:
            return "met" if met else "not met"

        sentences.append(
            f"Against the goals: exact copy where stated {copy:.0%} (goal "
            f"{_EXACT_COPY_GOAL:.0%}: {verdict(copy >= _EXACT_COPY_GOAL)}), abstention recall "
            f"{recall:.0%} (goal {_RECALL_GOAL:.0%}: {verdict(recall >= _RECALL_GOAL)}) at false "
            f"abstention {false:.0%} (bound {_FALSE_ABSTENTION_BOUND:.0%}: "
            f"{verdict(false <= _FALSE_ABSTENTION_BOUND)})."
        )
    return (
        '`abstention="guided"` uses mass-aware abstention on grounded decoding that writes every '
        'value a span of the document can fill (`grounding="values"`), where the engine '
        "reports token probabilities (the embedded model); elsewhere grounding and the "
        "instruction alone. Why, in this run's figures: " + " ".join(sentences)
    )


def _eval_setup(decisions: dict[str, Any], invoices: dict[str, Any] | None) -> str:
    def of(run: dict[str, Any], what: str) -> str:
        size = run["dataset_items"]
        return f"{run['items']} of the {size} {what}" if size else f"{run['items']} {what}"

    runs = [decisions] + ([invoices] if invoices else [])
    tokens = "/".join(str(run["max_tokens"]) for run in runs)
    minutes = sum(run["latency_total"] for run in runs) / 60
    scope = of(decisions, "decisions") + (f" and {of(invoices, 'invoices')}" if invoices else "")
    by_reason: dict[str, list[str]] = {}
    for arm, reason in decisions["unavailable"].items():
        by_reason.setdefault(reason, []).append(f"`{arm}`")
    skipped = "; ".join(
        f"{'arm' if len(arms) == 1 else 'arms'} {', '.join(arms)} not run: {reason}"
        for reason, arms in by_reason.items()
    )
    retries = decisions["retries"]
    return (
        f"`make eval` runs {scope} in `examples/data/eval/` on the embedded {decisions['model']}, "
        f"greedy, `max_tokens` {tokens}, {retries} {'retry' if retries == 1 else 'retries'} (the "
        f"calls' latencies add up to {minutes:.1f} minutes). The committed run, "
        f"`{decisions['folder']}/`" + (f" ({skipped})" if skipped else "") + ", as row 13 of "
        "`bench/RESULTS.md` summarizes it (all pairs are in its `report.html`):"
    )


def _eval_reading(decisions: dict[str, Any], invoices: dict[str, Any] | None) -> str:
    arms, items = decisions["arms"], decisions["items"]
    sentences = []
    free = arms.get("unconstrained")
    if free is not None:
        if free["valid"] == 0:
            sentences.append(
                f"a 135M model writes no valid `{decisions['contract']}` without the grammar "
                f"(none of the {free['items']} unconstrained outputs, even after the retry), so "
                "on this model the grammar is what makes an answer at all."
            )
        else:
            sentences.append(
                f"{_share(free['valid'], free['items'])} unconstrained outputs are valid "
                f"`{decisions['contract']}` documents."
            )
    among = [p for p in decisions["pairs"] if "unconstrained" not in (p["a"], p["b"])]
    if among:
        significant = sum(1 for p in among if p["significant"])
        moves = ", ".join(
            f"`{p['b']}` {p['difference'] * 100:+.0f} points against `{p['a']}` (p = "
            f"{p['p_value']:.2g})"
            for p in among
        )
        sentences.append(
            f"Between the constrained arms, {significant} of {len(among)} differences "
            f"{'is' if significant == 1 else 'are'} significant at {items} items: {moves}."
        )
    majority = decisions["majority"]
    if majority["label"]:
        sentences.append(
            f"Always answering `{majority['label']}` would score {majority['share']:.0%} on "
            "these items."
        )
    constrained = arms.get("constrained")
    flagged = constrained["mass_flagged"].get("/answer") if constrained else None
    if flagged:
        sentences.append(
            f"The `/answer` token's surviving mass is under {decisions['mass_threshold']:.0%} on "
            f"{flagged[0]} of {flagged[1]} items: there the grammar, not the model, picked the "
            "wire name."
        )
    if invoices is not None:
        valid = ", ".join(
            f"{arm} {_share(run['valid'], run['items'])}" for arm, run in invoices["arms"].items()
        )
        errors: dict[str, int] = {}
        for run in invoices["arms"].values():
            for name, count in run["errors"].items():
                errors[name] = errors.get(name, 0) + count
        ended = ", ".join(f"`{name}` {count}" for name, count in sorted(errors.items()))
        sentences.append(
            f"On the invoices, valid `{invoices['contract']}` outputs per arm: {valid}; the others "
            f"ended in {ended} (`{invoices['folder']}/`: each outcome keeps its error's message)."
        )
    whole = [run for run in (decisions, invoices) if run is not None and run["dataset_items"]]
    sizes = " ".join(
        f"EVAL_{run['folder'].rsplit('/', 1)[-1].upper()}={run['dataset_items']}" for run in whole
    )
    regenerate = (
        "Regenerate with `make eval` (`EVAL_FLAGS=--fresh` to start over"
        + (f"; `{sizes}` for the whole datasets" if sizes else "")
        + "), then `bench/run.py --only eval --write`."
    )
    return "What this data says: " + " ".join(sentences) + " " + regenerate


BLOCKS: dict[str, Callable[[_Quoted], str]] = {
    "demo": _demo,
    "eval": _eval,
    "performance": _performance,
}


# --- the guides' blocks (the same markers, in a page of docs/) ---

SCALE_OUT = ROOT / "docs" / "guides" / "scale-out.md"

# The model's assumptions: a fleet and client machines this bench did not measure. Each is
# written into the guide from these constants, beside the figures measured (row 23's values).
MODEL_ITEMS = 10_000_000
MODEL_REPLICAS = 100
MODEL_SLOTS = 64
"""Sequences a replica (vLLM on one GPU) decodes at once (`max_num_seqs`)."""
MODEL_LATENCY = 4.0
"""Seconds per item on a replica: a reply of about 400 tokens at 100 tokens/s per sequence."""
MODEL_CORES = 16
"""Cores of a client machine; one actor per core."""
MODEL_BUSY = 0.7
"""The share of an actor's core its calls may use (headroom for Ray and bursts)."""
MODEL_ACTOR_IN_FLIGHT = 256
"""The most calls one actor keeps in flight (its connection pools, its event loop)."""


def _scale_out(quoted: _Quoted) -> str:
    values = quoted.values("ray-actor-memory")
    if values is None:
        return "The model needs rows 21 to 23 of `bench/RESULTS.md` (not measured yet).\n"
    import math

    ideal = MODEL_REPLICAS * MODEL_SLOTS / MODEL_LATENCY
    per_actor = MODEL_BUSY * 1000 / values["actor_cpu_ms"]
    slots = MODEL_REPLICAS * MODEL_SLOTS
    actors = max(math.ceil(ideal / per_actor), math.ceil(slots / MODEL_ACTOR_IN_FLIGHT))
    in_flight = math.ceil(slots / actors)
    machines = math.ceil(actors / MODEL_CORES)
    ratio = values["ray_ideal_ratio"]
    share = quoted.line("fleet-ray", "fleet-ray")  # row 21's own figure, as its table shows it
    hours = MODEL_ITEMS / (ideal * ratio) / 3600
    ideal_hours = MODEL_ITEMS / ideal / 3600
    memory = MODEL_CORES * values["actor_rss_mb"] / 1024
    rows = [
        ("the fleet's ideal (replicas x slots / latency)", f"{ideal:,.0f} items/s"),
        ("one actor's capacity (measured CPU per item, at most "
         f"{MODEL_BUSY:.0%} of a core)", f"{per_actor:,.0f} items/s"),
        ("actors to keep up with the fleet (its CPU, and every slot busy)", f"{actors:,}"),
        ("calls in flight per actor", f"{in_flight:,}"),
        (f"client machines of {MODEL_CORES} cores", f"{machines:,}"),
        ("memory per client machine (measured peak per actor x cores)", f"{memory:.1f} GB"),
        (f"items/s at the share of the ideal the Ray path reached here ({share})",
         f"{ideal * ratio:,.0f} items/s"),
        (f"{MODEL_ITEMS:,} items at the fleet's ideal", f"{ideal_hours:.1f} hours"),
        ("... at the share of the ideal the Ray path reached here", f"{hours:.1f} hours"),
    ]  # fmt: skip
    table = "| | |\n| --- | --- |\n" + "".join(f"| {a} | {b} |\n" for a, b in rows)
    assumptions = _fill(
        f"Assumed (not measured): {MODEL_REPLICAS} replicas, each decoding {MODEL_SLOTS} "
        f"sequences at once and taking {MODEL_LATENCY:g} s per item (a reply of about 400 "
        f"tokens at 100 tokens/s per sequence); client machines of {MODEL_CORES} cores, one "
        f"actor per core, each kept under {MODEL_BUSY:.0%} busy and at most "
        f"{MODEL_ACTOR_IN_FLIGHT} calls in flight. Measured (rows 21 to 23 of "
        f"`bench/RESULTS.md`, {values['items']:,} items against the simulated fleet): "
        f"{values['actor_cpu_ms']:.2f} ms of CPU per item in an actor's process, "
        f"{values['actor_rss_mb']} MB peak memory per actor, and the Ray engine job at "
        f"{share} of that fleet's ideal (on the bench's shared machine, where the client "
        "was the limit: a pessimistic share for a cluster)."
    )
    return f"{assumptions}\n\n{table}"


GUIDES: dict[Path, dict[str, Callable[[_Quoted], str]]] = {SCALE_OUT: {"scale-out": _scale_out}}
"""Pages of docs/ with blocks of their own, and their blocks."""


def write_guides(results_json: Path = results.RESULTS_JSON) -> None:
    """Rewrite the guides' blocks from the results."""
    records = results.load(results_json)
    for page, renders in GUIDES.items():
        quoted = _Quoted(records)
        texts = {name: render(quoted) for name, render in renders.items()}
        text = page.read_text(encoding="utf-8")
        if with_blocks(text, texts) != text:  # a page already right is left untouched
            results.replace_file(page, with_blocks(text, texts))


def _guide_problems(records: dict[str, RowRecord]) -> list[str]:
    found = []
    for page, renders in GUIDES.items():
        quoted = _Quoted(records)
        texts = {name: render(quoted) for name, render in renders.items()}
        text = page.read_text(encoding="utf-8")
        try:
            if with_blocks(text, texts) != text:
                found.append(f"{page.name}'s figures are not the results': "
                             "`bench/readme_figures.py --write` writes them")  # fmt: skip
        except ValueError as error:
            found.append(f"{page.name}: {error}")
        quick = sorted(name for name in quoted.rows if name in records and records[name].quick)
        if quick:
            found.append(f"{page.name} quotes rows measured with --quick: {', '.join(quick)}")
        found += [f"a figure typed by hand in {page.name}: {s}" for s in stray_figures(text)]
    return found


def blocks(records: dict[str, RowRecord]) -> tuple[dict[str, str], set[str]]:
    """Every block's text, and the rows they quote."""
    quoted = _Quoted(records)
    texts = {name: render(quoted) for name, render in BLOCKS.items()}
    return texts, quoted.rows


def with_blocks(readme: str, texts: dict[str, str]) -> str:
    """`readme` with each block's body replaced; a missing block is a `ValueError`."""
    missing = sorted(set(texts) - {match["name"] for match in _BLOCK.finditer(readme)})
    if missing:
        raise ValueError(
            f"README.md has no block {', '.join(missing)}: put "
            f"{_OPEN.format(name=missing[0])} and {_CLOSE.format(name=missing[0])} where it goes"
        )

    def body(match: re.Match[str]) -> str:
        name = match["name"]
        if name not in texts:
            return match.group(0)
        return f"{_OPEN.format(name=name)}\n{texts[name]}{_CLOSE.format(name=name)}"

    return _BLOCK.sub(body, readme)


def stray_figures(readme: str) -> list[str]:
    """Figures typed by hand in the sections that hold generated blocks (outside the blocks and
    outside code). A section runs from a heading of any level to the next heading."""
    marker = "\0generated\0"
    outside = _BLOCK.sub(marker, readme)
    # Code first: a `# ` line in a fenced block is a comment, not a heading.
    outside = re.sub(r"^```.*?^```", "", outside, flags=re.DOTALL | re.MULTILINE)
    found = []
    for section in re.split(r"^(?=#{1,6} )", outside, flags=re.MULTILINE):
        if marker not in section:
            continue
        title, _, body = section.replace(marker, "").partition("\n")
        # One line of text, without code spans (option values, not figures).
        text = re.sub(r"`[^`]*`", "", " ".join(body.split()))
        for match in _FIGURE.finditer(text):
            context = text[max(0, match.start() - 40) : match.end() + 20]
            found.append(f"{title}: {match.group(0)!r} in: ...{context}...")
    return found


def problems(
    readme: Path = README,
    results_json: Path = results.RESULTS_JSON,
    page: Path = results.RESULTS_MD,
) -> list[str]:
    """Everything `--check` fails on (see the module docstring); empty when all is well."""
    import eval_summary

    _register_rows()
    records = results.load(results_json)
    found = []
    if not page.exists() or page.read_text(encoding="utf-8") != results.render(records):
        found.append(
            f"{page.name} is not what {results_json.name} renders to (edited by hand?): "
            "`bench/run.py --only ROW --write` rewrites it"
        )
    texts, quoted = blocks(records)
    text = readme.read_text(encoding="utf-8")
    try:
        if with_blocks(text, texts) != text:
            changed = [
                match["name"]
                for match in _BLOCK.finditer(text)
                if match["name"] in texts and match["body"] != texts[match["name"]]
            ]
            found.append(
                f"README.md's figures ({', '.join(changed)}) are not the results': "
                "`bench/readme_figures.py --write` writes them"
            )
    except ValueError as error:
        found.append(str(error))
    quick = sorted(name for name in quoted if name in records and records[name].quick)
    if quick:
        found.append(
            f"the README quotes rows measured with --quick (a smoke run): {', '.join(quick)}; "
            "measure them again without it"
        )
    summary = records.get("eval")
    if summary is not None and (summary.values or {}).get("digest") != eval_summary.digest():
        found.append(
            "eval-results/ changed since the eval summary was written: "
            "`bench/run.py --only eval --write`"
        )
    found += [f"a figure typed by hand: {stray}" for stray in stray_figures(text)]
    return found + _guide_problems(records)


def _register_rows() -> None:
    """Every row, so that the page renders as `bench/run.py` renders it."""
    import rows

    rows.load_rows()


def write(readme: Path = README, results_json: Path = results.RESULTS_JSON) -> None:
    """Rewrite the README's blocks from the results."""
    texts, _ = blocks(results.load(results_json))
    text = readme.read_text(encoding="utf-8")
    results.replace_file(readme, with_blocks(text, texts))


def check() -> int:
    found = problems(README, results.RESULTS_JSON, results.RESULTS_MD)
    for problem in found:
        print(f"readme_figures: {problem}", file=sys.stderr)
    return 1 if found else 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    action = parser.add_mutually_exclusive_group(required=True)
    action.add_argument("--write", action="store_true",
                        help="render the README's blocks and bench/RESULTS.md again")  # fmt: skip
    action.add_argument("--check", action="store_true", help="exit 1 on any mismatch")
    args = parser.parse_args(argv)
    if args.write:
        _register_rows()
        results.write_page(results.load(results.RESULTS_JSON), results.RESULTS_MD)
        write(README, results.RESULTS_JSON)
        write_guides(results.RESULTS_JSON)
        return 0
    return check()


if __name__ == "__main__":
    sys.exit(main())
