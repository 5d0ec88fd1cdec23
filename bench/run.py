"""The bench: one command writes every published figure, each a ratio measured in this run.

    make bench                                   # = bench/run.py --write: every row
    .venv/bin/python bench/run.py --list         # the rows: number, name, what each measures
    .venv/bin/python bench/run.py --only parse,fan-out          # print only those rows
    .venv/bin/python bench/run.py --only eval --write           # re-measure one row, keep the rest
    .venv/bin/python bench/run.py --quick        # fewer repetitions: a smoke run of the machinery

Every row is a function registered with `registry.row` (name, number, title, what it measures,
the unit of its figure), in `bench/rows.py` or in the script that measures it
(`rows.ROW_MODULES`). With
`--write` the rows that ran are stamped (date, commit, machine, load) into bench/results.json,
bench/RESULTS.md is rendered from that file, and so are the README's generated figures
(`bench/readme_figures.py`); nothing else writes them. `--only` takes row names (or numbers) and
refuses unknown ones. A row measured with `--quick` says so, and `make test` refuses to publish
it. How to add a row: bench/README.md.

Times are CPU times (`time.process_time`) where a figure compares computations (the machine is
shared: the least of several batches is the figure least disturbed by other work), wall times
where waiting is the point (fan-out, decoding speed, the demo). Nothing here is a test: tests/
never time anything.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

BENCH = Path(__file__).resolve().parent
sys.path[:0] = [str(BENCH.parent), str(BENCH)]

import results  # noqa: E402
from registry import REGISTRY  # noqa: E402
from registry import Settings  # noqa: E402
from registry import UnknownRows  # noqa: E402
from registry import select  # noqa: E402
from rows import DEFAULT_MASKBENCH  # noqa: E402
from rows import load_rows  # noqa: E402

# --- Running ---


def main(argv: list[str] | None = None) -> int:
    load_rows()
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--write", action="store_true",
                        help="record the rows in bench/results.json and render bench/RESULTS.md "
                             "and the README's figures from it")  # fmt: skip
    parser.add_argument("--quick", action="store_true",
                        help="fewer repetitions and smaller inputs: a smoke run (recorded as "
                             "such; make test refuses to publish it)")  # fmt: skip
    parser.add_argument("--only", default="",
                        help="comma-separated row names or numbers (see --list); with --write, "
                             "only these rows are measured again, the others kept")  # fmt: skip
    parser.add_argument("--list", action="store_true", help="list the rows and exit")
    parser.add_argument("--maskbench", type=Path,
                        default=Path(os.environ.get("MASKBENCH", DEFAULT_MASKBENCH)),
                        help="the extracted maskbench corpus (default: $MASKBENCH or "
                             f"{DEFAULT_MASKBENCH})")  # fmt: skip
    args = parser.parse_args(argv)
    if args.list:
        for entry in REGISTRY.values():
            long = " (minutes)" if entry.long else ""
            print(f"{entry.number:>3}  {entry.name:<15} {entry.measures}{long}")
        return 0
    try:
        chosen = select(args.only.split(",")) if args.only else list(REGISTRY.values())
    except UnknownRows as error:
        parser.error(str(error))
    settings = Settings(quick=args.quick, maskbench=args.maskbench)
    commit = results.source_state()
    fresh: dict[str, results.RowRecord] = {}
    for entry in chosen:
        print(f"bench: row {entry.number}, {entry.name} ...", file=sys.stderr, flush=True)
        fresh[entry.name] = results.run_row(entry, settings, commit=commit)
        if fresh[entry.name].error:
            print(f"bench: row {entry.name} failed: {fresh[entry.name].error}", file=sys.stderr)
    print(results.render_table(fresh))
    if args.write:
        import readme_figures

        merged = results.merge(results.load(results.RESULTS_JSON), fresh, full=not args.only)
        results.save(merged, results.RESULTS_JSON)
        # The page from the file as written: what `make test` renders it from.
        results.write_page(results.load(results.RESULTS_JSON), results.RESULTS_MD)
        readme_figures.write(readme_figures.README, results.RESULTS_JSON)
        readme_figures.write_guides(results.RESULTS_JSON)
        print("wrote bench/results.json, bench/RESULTS.md and the README's figures",
              file=sys.stderr)  # fmt: skip
    return 1 if any(rec.error for rec in fresh.values()) else 0


if __name__ == "__main__":
    sys.exit(main())
