"""What a run says, for people: tables for the terminal (rich) and a self-contained HTML report.

The HTML file has everything inline: its styles, and charts drawn here as SVG (accuracy and
abstention per arm with 95% intervals, the paired differences with their bootstrap intervals,
the surviving mass per field). No script, font, stylesheet or image is fetched from anywhere, so
it opens offline and leaks nothing when opened.
"""

from __future__ import annotations

import html
import math
from collections.abc import Sequence
from typing import Any

from sdk._files import write_atomic
from sdk.calibration import reliability
from sdk.eval.arms import ARM_TITLES
from sdk.eval.metrics import confidence_samples
from sdk.eval.runner import EvalRun
from sdk.eval.runner import Pair
from sdk.eval.stats import Interval

__all__ = [
    "ACCURACY_FILE",
    "REPORT_FILE",
    "accuracy_svg",
    "html_report",
    "interval_text",
    "markdown_table",
    "print_tables",
    "terminal_tables",
    "verdict",
    "write_html",
]

REPORT_FILE = "report.html"
ACCURACY_FILE = "accuracy.svg"

# Chart geometry (SVG user units) and colours (colour-blind safe: Okabe-Ito).
_WIDTH, _LABEL, _ROW = 720, 230, 26
_BLUE, _ORANGE, _GREY, _RED = "#0072B2", "#E69F00", "#777777", "#D55E00"
_MASS_FLOOR = 1e-8


def verdict(pair: Pair) -> str:
    """One line on a pair: which arm is more accurate, or that the difference is noise; when
    McNemar's test and the bootstrap interval disagree (a significant test beside an interval
    across 0, or an interval that excludes 0 beside a test that is not significant), it says
    so in words instead of picking one."""
    result = pair.result
    if result.items == 0:
        return "no items in common"
    p = result.mcnemar.p_value
    interval = result.difference
    excludes_zero = interval.low > 0 or interval.high < 0
    better, worse = (pair.b, pair.a) if interval.estimate > 0 else (pair.a, pair.b)
    if result.significant and excludes_zero:
        return f"{better} more accurate than {worse} (p = {p:.2g})"
    if not result.significant and not excludes_zero:
        return f"no significant difference (p = {p:.2g})"
    if excludes_zero:
        return (
            f"inconclusive: the interval excludes 0 ({better} ahead) but McNemar's test is "
            f"not significant (p = {p:.2g}); the two tests disagree at this sample size"
        )
    return (
        f"inconclusive: McNemar's test is significant (p = {p:.2g}) but the interval includes "
        "0; the two tests disagree at this sample size"
    )


# --- terminal ----------------------------------------------------------------------------------


def terminal_tables(run: EvalRun) -> list[Any]:
    """rich renderables: the arms table, the pairs table, and the arms that did not run. Arm
    names never wrap or shorten; the other cells wrap when the width is short."""
    from rich.table import Table

    arms = Table(title=f"{_contract(run)}: {len(run.items)} items", title_justify="left")
    _name_column(arms, "arm", list(run.metrics))
    for column in ("valid", "accuracy (95% CI)", "abstain recall", "false abstain", "ECE"):
        arms.add_column(column, justify="right", overflow="fold")
    for column in ("retries", "tokens in/out", "latency p50/p95"):
        arms.add_column(column, justify="right", overflow="fold")
    for arm, m in run.metrics.items():
        arms.add_row(
            arm,
            _pct(m.validity.estimate),
            interval_text(m.accuracy),
            interval_text(m.abstention_recall) if m.abstention_recall else "-",
            interval_text(m.false_abstention) if m.false_abstention else "-",
            _ece(m.calibration_error, m.calibrated_error),
            str(m.retries),
            f"{m.input_tokens}/{m.output_tokens}",
            f"{m.latency_p50:.1f}s/{m.latency_p95:.1f}s",
        )
    tables: list[Any] = [arms]
    if run.pairs:
        pairs = Table(title="paired accuracy differences (B - A)", title_justify="left")
        _name_column(pairs, "A", [pair.a for pair in run.pairs])
        _name_column(pairs, "B", [pair.b for pair in run.pairs])
        for column in ("items", "B - A (95% CI)", "only A / only B", "McNemar p"):
            pairs.add_column(column, justify="right", overflow="fold")
        pairs.add_column("reading", overflow="fold")
        for pair in run.pairs:
            d, t = pair.result.difference, pair.result.mcnemar
            pairs.add_row(
                pair.a,
                pair.b,
                str(pair.result.items),
                _signed_interval(d),
                f"{t.only_a} / {t.only_b}",
                f"{t.p_value:.3g}",
                verdict(pair),
            )
        tables.append(pairs)
    if run.unavailable:
        skipped = Table(title="arms not run", title_justify="left")
        _name_column(skipped, "arm", list(run.unavailable))
        skipped.add_column("why", overflow="fold")
        for arm, reason in run.unavailable.items():
            skipped.add_row(arm, reason)
        tables.append(skipped)
    return tables


def _name_column(table: Any, header: str, names: Sequence[str]) -> None:
    width = max([len(header), *(len(name) for name in names)])
    table.add_column(header, justify="left", no_wrap=True, min_width=width)


def print_tables(console: Any, run: EvalRun) -> None:
    """Print `terminal_tables(run)` on a rich `Console` so that they fit: on a terminal at its
    width (a table that cannot fit even wrapped is printed as one block of lines per row); to
    a file or a pipe at each table's own full width, so that nothing is wrapped or cut."""
    from rich.console import Console
    from rich.measure import Measurement

    for table in terminal_tables(run):
        unbounded = console.options.update(width=_UNBOUNDED, max_width=_UNBOUNDED)
        needed = Measurement.get(console, unbounded, table)
        if not console.is_terminal:
            wide = Console(file=console.file, width=needed.maximum, color_system=None)
            wide.print(table, crop=False)
        elif needed.minimum <= console.width:
            console.print(table)
        else:
            console.print(_rows_as_records(table))


_UNBOUNDED = 10_000


def _rows_as_records(table: Any) -> Any:
    """A table as text, a block per row (`header: cell` lines): fits any width."""
    from rich.text import Text

    columns = table.columns
    cells = [list(column.cells) for column in columns]
    text = Text(f"{table.title}\n" if table.title else "", style="bold")
    for row in range(table.row_count):
        text.append(f"{cells[0][row]}\n", style="bold")
        for column, values in zip(columns[1:], cells[1:], strict=True):
            text.append(f"  {column.header}: {values[row]}\n")
    return text


def markdown_table(run: EvalRun) -> str:
    """The arms and pairs as Markdown tables (for a README)."""
    lines = [
        "| arm | valid | accuracy (95% CI) | exact copies | abstention recall | false abstention "
        "| ECE | retries | tokens in/out | latency p50 |",
        "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for arm, m in run.metrics.items():
        lines.append(
            f"| {arm} | {interval_text(m.validity)} | {interval_text(m.accuracy)} | "
            f"{interval_text(m.stated_accuracy)} | "
            f"{interval_text(m.abstention_recall) if m.abstention_recall else '-'} | "
            f"{interval_text(m.false_abstention) if m.false_abstention else '-'} | "
            f"{_ece(m.calibration_error, m.calibrated_error)} | {m.retries} | "
            f"{m.input_tokens}/{m.output_tokens} | {m.latency_p50:.1f}s |"
        )
    if run.pairs:
        lines += [
            "",
            "| A | B | B - A (95% CI) | McNemar p | reading |",
            "| --- | --- | ---: | ---: | --- |",
        ]
        for pair in run.pairs:
            lines.append(
                f"| {pair.a} | {pair.b} | {_signed_interval(pair.result.difference)} | "
                f"{pair.result.mcnemar.p_value:.3g} | {verdict(pair)} |"
            )
    return "\n".join(lines)


# --- HTML --------------------------------------------------------------------------------------


def write_html(run: EvalRun, path: str) -> None:
    """Write the HTML report atomically."""
    write_atomic(path, html_report(run), private=True)


def html_report(run: EvalRun) -> str:
    """The whole report as one self-contained HTML document."""
    parts = _head(run)
    if not run.complete:
        parts.append('<p class="warn">This run is incomplete: run the same command to finish.</p>')
    parts += ["<h2>Arms</h2>", _arms_table(run)]
    parts += _accuracy_and_abstention(run)
    if run.pairs:
        parts += [
            "<h2>Paired differences</h2>",
            "<p>Accuracy of B minus accuracy of A on the same items, with a 95% bootstrap "
            "interval (items resampled); McNemar's exact test on the items only one arm got "
            "right. An interval across 0 with a large p is noise at this sample size.</p>",
            _difference_chart(run.pairs),
            _pairs_table(run.pairs),
        ]
    parts += ["<h2>Accuracy per field</h2>", _fields_table(run)]
    if any(m.mass for m in run.metrics.values()):
        parts += [
            "<h2>Surviving probability mass per field</h2>",
            "<p>Per field, the lowest share of the model's own probability the grammar left "
            "allowed while writing it: the dot is the median over items, the cross the lowest "
            "item. Far left (log scale) means the grammar, not the model, chose the tokens.</p>",
            _mass_chart(run),
        ]
    parts += _reliability_section(run)
    if run.unavailable:
        parts.append("<h2>Arms not run</h2><ul>")
        parts += [f"<li><b>{_e(a)}</b>: {_e(r)}</li>" for a, r in run.unavailable.items()]
        parts.append("</ul>")
    parts += ["<h2>Items</h2>", _items_table(run), "</body></html>"]
    return "\n".join(parts) + "\n"


def _head(run: EvalRun) -> list[str]:
    """The document's head, its title and the line saying what the run was made with."""
    config = run.config
    title = f"sdk eval: {_contract(run)}"
    return [
        "<!DOCTYPE html>",
        '<html lang="en"><head><meta charset="utf-8">',
        # No request of any kind: the policy forbids everything not inline.
        '<meta http-equiv="Content-Security-Policy" content="default-src \'none\'; '
        "style-src 'unsafe-inline'; img-src data:\">",
        f"<title>{_e(title)}</title>",
        f"<style>{_CSS}</style></head><body>",
        f"<h1>{_e(title)}</h1>",
        '<p class="meta">',
        f"dataset <b>{_e(str(config.get('dataset') or '-'))}</b>, {len(run.items)} items; "
        f"provider <b>{_e(str(config.get('provider')))}</b>, model "
        f"<b>{_e(str(config.get('model')))}</b>; max_tokens {_e(str(config.get('max_tokens')))}, "
        f"retries {_e(str(config.get('retries')))}, options {_e(str(config.get('options') or {}))}"
        f"; contract fingerprint <code>{_e(_fingerprint(run))}</code>.",
        "</p>",
    ]


def _accuracy_and_abstention(run: EvalRun) -> list[str]:
    """The two charts of the arms' headline rates, each with its 95% Wilson intervals."""
    return [
        "<h2>Accuracy per arm</h2>",
        "<p>Share of items with every labelled field right; bars are 95% Wilson intervals.</p>",
        _interval_chart(
            "accuracy-chart",
            [(arm, m.accuracy, _BLUE) for arm, m in run.metrics.items()],
        ),
        "<h2>Abstention per arm</h2>",
        "<p>Abstention recall (blue): on fields the document does not state, how often the "
        "output abstained (null or an escape member). False abstention (orange): on fields it "
        "does state, how often the output abstained anyway.</p>",
        _interval_chart(
            "abstention-chart",
            [
                row
                for arm, m in run.metrics.items()
                for row in (
                    (f"{arm}: recall", m.abstention_recall, _BLUE),
                    (f"{arm}: false", m.false_abstention, _ORANGE),
                )
            ],
        ),
    ]


def _reliability_section(run: EvalRun) -> list[str]:
    """The reliability plots of the arms' confidence (none when no arm reported any)."""
    if not any(m.calibration_error for m in run.metrics.values()):
        return []
    return [
        "<h2>Confidence: reliability</h2>",
        "<p>Per arm, the values it returned (not null) grouped in ten bins of confidence "
        "(<code>Result.confidence</code>): the share right (up) against the mean confidence "
        "(across). On the diagonal, confidence is the probability of being right; under it, "
        "the model is surer than it is right. Blue: confidence as decoded; orange: after "
        "the run's confidence calibration, where it has one. Dot area: how many values. "
        "ECE (expected calibration error): the bins' gaps to the diagonal, weighted by "
        "their share of the values, with a 95% bootstrap interval.</p>",
        '<div class="reliability">',
        *_reliability_charts(run),
        "</div>",
    ]


def _arms_table(run: EvalRun) -> str:
    rows = [
        '<table id="arms"><thead><tr><th>arm</th><th>what</th><th>items</th><th>valid</th>'
        "<th>accuracy (95% CI)</th><th>abstention recall</th><th>false abstention</th>"
        "<th>calibration error (ECE)</th><th>retries</th><th>tokens in / out</th>"
        "<th>latency p50 / p95</th></tr></thead><tbody>"
    ]
    for arm, m in run.metrics.items():
        rows.append(
            f"<tr><td>{_e(arm)}</td><td>{_e(ARM_TITLES.get(arm, ''))}</td><td>{m.items}</td>"
            f"<td>{_pct(m.validity.estimate)}</td><td>{interval_text(m.accuracy)}</td>"
            f"<td>{interval_text(m.abstention_recall) if m.abstention_recall else '-'}</td>"
            f"<td>{interval_text(m.false_abstention) if m.false_abstention else '-'}</td>"
            f"<td>{_e(_ece(m.calibration_error, m.calibrated_error))}</td>"
            f"<td>{m.retries}</td><td>{m.input_tokens} / {m.output_tokens}</td>"
            f"<td>{m.latency_p50:.2f} s / {m.latency_p95:.2f} s</td></tr>"
        )
    rows.append("</tbody></table>")
    return "\n".join(rows)


def _pairs_table(pairs: Sequence[Pair]) -> str:
    rows = [
        '<table id="pairs"><thead><tr><th>A</th><th>B</th><th>items</th>'
        "<th>B &minus; A (95% CI)</th><th>only A right</th><th>only B right</th>"
        "<th>McNemar p</th><th>reading</th></tr></thead><tbody>"
    ]
    for pair in pairs:
        d, t = pair.result.difference, pair.result.mcnemar
        rows.append(
            f"<tr><td>{_e(pair.a)}</td><td>{_e(pair.b)}</td><td>{pair.result.items}</td>"
            f"<td>{_signed_interval(d)}</td><td>{t.only_a}</td><td>{t.only_b}</td>"
            f"<td>{t.p_value:.3g}</td><td>{_e(verdict(pair))}</td></tr>"
        )
    rows.append("</tbody></table>")
    return "\n".join(rows)


def _fields_table(run: EvalRun) -> str:
    names = list(dict.fromkeys(n for m in run.metrics.values() for n in m.field_accuracy))
    head = "".join(f"<th>{_e(n)}</th>" for n in names)
    rows = [f'<table id="fields"><thead><tr><th>arm</th>{head}</tr></thead><tbody>']
    for arm, m in run.metrics.items():
        cells = "".join(
            f"<td>{interval_text(m.field_accuracy[n]) if n in m.field_accuracy else '-'}</td>"
            for n in names
        )
        rows.append(f"<tr><td>{_e(arm)}</td>{cells}</tr>")
    rows.append("</tbody></table>")
    return "\n".join(rows)


def _items_table(run: EvalRun) -> str:
    arms = list(run.metrics)
    head = "".join(f"<th>{_e(a)}</th>" for a in arms)
    rows = [f'<table id="items"><thead><tr><th>item</th>{head}</tr></thead><tbody>']
    for item in run.items:
        cells = []
        for arm in arms:
            outcome = run.outcomes.get((arm, item.id))
            if outcome is None:
                cells.append("<td>-</td>")
                continue
            mark = "right" if outcome.correct else "wrong" if outcome.valid else "invalid"
            wrong = [n for n, s in outcome.fields.items() if not s.correct]
            detail = outcome.error or (", ".join(wrong) if wrong else "")
            shown = _e(_clip(outcome.text or "", 600))
            cells.append(
                f'<td class="{mark}"><details><summary>{mark}'
                f"{' (' + _e(detail) + ')' if detail else ''}</summary><pre>{shown}</pre>"
                "</details></td>"
            )
        rows.append(f"<tr><td>{_e(item.id)}</td>{''.join(cells)}</tr>")
    rows.append("</tbody></table>")
    return "\n".join(rows)


# --- charts (inline SVG) -----------------------------------------------------------------------


def accuracy_svg(run: EvalRun) -> str:
    """The accuracy-per-arm chart as a standalone SVG file (for a README): the chart of the
    report, with the namespace a file needs and its own white background and font."""
    chart = _interval_chart(
        "accuracy-chart", [(arm, m.accuracy, _BLUE) for arm, m in run.metrics.items()]
    )
    standalone = '<svg xmlns="http://www.w3.org/2000/svg" style="background:#fff" '
    return chart.replace("<svg ", standalone, 1) + "\n"


def _interval_chart(name: str, rows: Sequence[tuple[str, Interval | None, str]]) -> str:
    """Horizontal bars from 0 to the estimate, with the interval as a whisker; 0..100%."""
    shown = [(label, value, colour) for label, value, colour in rows if value is not None]
    if not shown:
        return "<p>(nothing to show)</p>"
    plot = _WIDTH - _LABEL - 60
    height = 30 + _ROW * len(shown)
    out = [_svg_open(name, height), *_percent_axis(plot, height)]
    for index, (label, value, colour) in enumerate(shown):
        assert value is not None
        y = 20 + _ROW * index
        x0 = _LABEL
        out.append(_text(_LABEL - 8, y + 13, label, anchor="end"))
        out.append(
            f'<rect x="{x0}" y="{y + 4}" width="{value.estimate * plot:.1f}" height="14" '
            f'fill="{colour}" fill-opacity="0.75"><title>{_e(label)}: '
            f"{interval_text(value)}</title></rect>"
        )
        out.append(_whisker(x0 + value.low * plot, x0 + value.high * plot, y + 11))
        out.append(_text(x0 + plot + 6, y + 15, _pct(value.estimate)))
    out.append("</svg>")
    return "\n".join(out)


def _difference_chart(pairs: Sequence[Pair]) -> str:
    """Forest plot: each pair's difference (B - A) and its interval on a -100%..+100% axis."""
    plot = _WIDTH - _LABEL - 80
    height = 30 + _ROW * len(pairs)
    centre = _LABEL + plot / 2
    out = [_svg_open("difference-chart", height)]
    for tick in (-1.0, -0.5, 0.0, 0.5, 1.0):
        x = centre + tick * plot / 2
        dashed = ' stroke-dasharray="3 3"' if tick else ""
        out.append(
            f'<line x1="{x:.1f}" y1="14" x2="{x:.1f}" y2="{height - 6}" stroke="#ccc"{dashed}/>'
        )
        out.append(_text(x, 11, f"{tick:+.0%}" if tick else "0", anchor="middle", size=10))
    for index, pair in enumerate(pairs):
        y = 20 + _ROW * index + 11
        d = pair.result.difference
        colour = _RED if pair.result.significant else _GREY
        out.append(_text(_LABEL - 8, y + 4, f"{pair.b} - {pair.a}", anchor="end"))
        out.append(_whisker(centre + d.low * plot / 2, centre + d.high * plot / 2, y, colour))
        out.append(
            f'<circle cx="{centre + d.estimate * plot / 2:.1f}" cy="{y}" r="4.5" fill="{colour}">'
            f"<title>{_e(verdict(pair))}</title></circle>"
        )
        out.append(_text(_LABEL + plot + 6, y + 4, f"p = {pair.result.mcnemar.p_value:.2g}"))
    out.append("</svg>")
    return "\n".join(out)


def _mass_chart(run: EvalRun) -> str:
    """Per (arm, field): the median and lowest surviving mass, on a log axis 1e-8..1."""
    rows = [
        (f"{arm} {pointer}", summary.median, summary.lowest)
        for arm, m in run.metrics.items()
        for pointer, summary in m.mass.items()
    ]
    plot = _WIDTH - _LABEL - 60
    height = 30 + _ROW * len(rows)
    decades = -math.log10(_MASS_FLOOR)

    def x_of(mass: float) -> float:
        return _LABEL + (1 + math.log10(max(mass, _MASS_FLOOR)) / decades) * plot

    out = [_svg_open("mass-chart", height)]
    for exponent in range(int(decades) + 1):
        x = x_of(10.0**-exponent)
        out.append(f'<line x1="{x:.1f}" y1="14" x2="{x:.1f}" y2="{height - 6}" stroke="#ddd"/>')
        out.append(_text(x, 11, f"1e-{exponent}" if exponent else "1", anchor="middle", size=10))
    for index, (label, median, lowest) in enumerate(rows):
        y = 20 + _ROW * index + 11
        out.append(_text(_LABEL - 8, y + 4, label, anchor="end"))
        out.append(
            f'<line x1="{x_of(lowest):.1f}" y1="{y}" x2="{x_of(median):.1f}" y2="{y}" '
            f'stroke="{_GREY}"/>'
        )
        lx = x_of(lowest)
        out.append(
            f'<path d="M{lx - 4:.1f},{y - 4} L{lx + 4:.1f},{y + 4} M{lx - 4:.1f},{y + 4} '
            f'L{lx + 4:.1f},{y - 4}" stroke="{_RED}" stroke-width="1.5"/>'
        )
        out.append(
            f'<circle cx="{x_of(median):.1f}" cy="{y}" r="4.5" fill="{_BLUE}"><title>'
            f"{_e(label)}: median {median:.2g}, lowest {lowest:.2g}</title></circle>"
        )
    out.append("</svg>")
    return "\n".join(out)


def _reliability_charts(run: EvalRun) -> list[str]:
    """One reliability diagram per arm with confident values (raw, and calibrated)."""
    calibration = run.confidence_calibration
    size, pad = 230, 34
    plot = size - 2 * pad
    charts = []
    for arm, metrics in run.metrics.items():
        samples = confidence_samples(run.outcomes_of(arm))
        if not samples:
            continue
        correct = [s.correct for s in samples]
        series = [(_BLUE, reliability([s.confidence for s in samples], correct))]
        if calibration is not None:
            mapped = [calibration.probability(s.kind, s.confidence, s.field) for s in samples]
            series.append((_ORANGE, reliability(mapped, correct)))
        out = [
            f'<svg id="reliability-{_e(arm)}" role="img" viewBox="0 0 {size} {size + 16}" '
            f'width="{size}" height="{size + 16}">',
            _text(size / 2, 14, arm, anchor="middle", size=12),
            f'<rect x="{pad}" y="{pad}" width="{plot}" height="{plot}" fill="none" stroke="#ccc"/>',
            f'<line x1="{pad}" y1="{pad + plot}" x2="{pad + plot}" y2="{pad}" stroke="#999" '
            'stroke-dasharray="4 3"/>',
            _text(pad, pad + plot + 14, "0", anchor="middle", size=10),
            _text(pad + plot, pad + plot + 14, "1", anchor="middle", size=10),
            _text(size / 2, pad + plot + 26, "confidence", anchor="middle", size=10),
            _text(pad - 6, pad + 4, "1", anchor="end", size=10),
            _text(pad - 6, pad + plot, "0", anchor="end", size=10),
        ]
        for colour, points in series:
            for mean, accuracy, count in points:
                x, y = pad + mean * plot, pad + (1 - accuracy) * plot
                radius = 2 + 6 * math.sqrt(count / len(samples))
                out.append(
                    f'<circle cx="{x:.1f}" cy="{y:.1f}" r="{radius:.1f}" fill="{colour}" '
                    f'fill-opacity="0.7"><title>{_e(arm)}: {count} values at mean confidence '
                    f"{mean:.2f}, {accuracy:.0%} right</title></circle>"
                )
        ece = _ece(metrics.calibration_error, metrics.calibrated_error)
        out += [_text(size / 2, size + 12, f"ECE {ece}", anchor="middle", size=10), "</svg>"]
        charts.append("\n".join(out))
    return charts


def _svg_open(name: str, height: int) -> str:
    return (
        f'<svg id="{name}" role="img" '
        f'viewBox="0 0 {_WIDTH} {height}" width="{_WIDTH}" height="{height}">'
    )


def _percent_axis(plot: int, height: int) -> list[str]:
    lines = []
    for tick in (0.0, 0.25, 0.5, 0.75, 1.0):
        x = _LABEL + tick * plot
        lines.append(f'<line x1="{x:.1f}" y1="14" x2="{x:.1f}" y2="{height - 6}" stroke="#ddd"/>')
        lines.append(_text(x, 11, f"{tick:.0%}", anchor="middle", size=10))
    return lines


def _whisker(x1: float, x2: float, y: float, colour: str = "#222") -> str:
    return (
        f'<path d="M{x1:.1f},{y - 5} V{y + 5} M{x1:.1f},{y} H{x2:.1f} M{x2:.1f},{y - 5} '
        f'V{y + 5}" stroke="{colour}" stroke-width="1.5" fill="none"/>'
    )


def _text(x: float, y: float, text: str, *, anchor: str = "start", size: int = 12) -> str:
    return (
        f'<text x="{x:.1f}" y="{y:.1f}" font-size="{size}" text-anchor="{anchor}">{_e(text)}</text>'
    )


# --- formatting --------------------------------------------------------------------------------

_CSS = """
body{font:14px/1.45 system-ui,-apple-system,"Segoe UI",sans-serif;margin:2em auto;max-width:1100px;
color:#222;padding:0 1em}
h1{font-size:1.5em}h2{font-size:1.2em;margin-top:1.8em}
table{border-collapse:collapse;margin:.5em 0}td,th{border:1px solid #ccc;padding:.25em .5em;
text-align:right;vertical-align:top}td:first-child,th:first-child{text-align:left}
#arms td:nth-child(2),#pairs td:nth-child(2),#pairs td:last-child,#items td{text-align:left}
.meta{color:#555}.warn{color:#a00;font-weight:bold}
td.right{background:#e8f4ea}td.wrong{background:#fbeaea}td.invalid{background:#f2f2f2}
pre{white-space:pre-wrap;max-width:40em;text-align:left;font-size:12px}
details summary{cursor:pointer}svg text{font-family:system-ui,sans-serif;fill:#222}
"""


def _e(text: str) -> str:
    return html.escape(text, quote=True)


def _pct(value: float) -> str:
    return f"{value:.0%}"


def interval_text(value: Interval | None) -> str:
    """A proportion with its interval as the tables show it (`"62% [51%, 72%]"`; `-` for none)."""
    if value is None:
        return "-"
    return f"{value.estimate:.0%} [{value.low:.0%}, {value.high:.0%}]"


def _ece(raw: Interval | None, calibrated: Interval | None) -> str:
    """Calibration error as decoded, then after calibration where there is one."""
    if raw is None:
        return "-"
    shown = f"{raw.estimate:.3f} [{raw.low:.3f}, {raw.high:.3f}]"
    if calibrated is not None:
        shown += f" -> {calibrated.estimate:.3f} [{calibrated.low:.3f}, {calibrated.high:.3f}]"
    return shown


def _signed_interval(value: Interval) -> str:
    return f"{value.estimate:+.0%} [{value.low:+.0%}, {value.high:+.0%}]"


def _clip(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _contract(run: EvalRun) -> str:
    contract = run.config.get("contract") or {}
    return f"{contract.get('name', '?')} v{contract.get('version', '?')}"


def _fingerprint(run: EvalRun) -> str:
    contract = run.config.get("contract") or {}
    return str(contract.get("fingerprint", ""))[:16]
