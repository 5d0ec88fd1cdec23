"""The paired evaluation: what a constraint costs, measured on your own labelled data.

Constrained decoding makes invalid output unreachable, and can make wrong answers more likely
without a trace. The way to know is to run the same items through several ways of asking (the
arms, `sdk.eval.arms`) and score task accuracy and abstention, not validity, with statistics
that say when a difference is noise. `sdk eval DATASET --contract MODULE:NAME` on the command
line; `load_dataset` and `run_eval` here.
"""

from sdk.eval.arms import ARM_TITLES, ARMS, ArmUnavailable, PreparedArm, prepare_arm, run_arm
from sdk.eval.dataset import (
    DEFAULT_PROMPT,
    DatasetError,
    EvalItem,
    item_digest,
    load_dataset,
    parse_dataset,
)
from sdk.eval.metrics import ArmMetrics, FieldScore, MassSummary, Outcome, arm_metrics, score
from sdk.eval.report import (
    html_report,
    markdown_table,
    print_tables,
    terminal_tables,
    verdict,
    write_html,
)
from sdk.eval.runner import (
    RESULTS_FILE,
    EvalRun,
    Pair,
    ResumeMismatch,
    load_results,
    run_eval,
    summarize,
)
from sdk.eval.stats import (
    Interval,
    McNemar,
    PairedDifference,
    binomial_two_sided,
    mcnemar_exact,
    paired_bootstrap,
    wilson_interval,
)

__all__ = [
    "ARMS",
    "ARM_TITLES",
    "DEFAULT_PROMPT",
    "RESULTS_FILE",
    "ArmMetrics",
    "ArmUnavailable",
    "DatasetError",
    "EvalItem",
    "EvalRun",
    "FieldScore",
    "Interval",
    "MassSummary",
    "McNemar",
    "Outcome",
    "Pair",
    "PairedDifference",
    "PreparedArm",
    "ResumeMismatch",
    "arm_metrics",
    "binomial_two_sided",
    "html_report",
    "item_digest",
    "load_dataset",
    "load_results",
    "markdown_table",
    "mcnemar_exact",
    "paired_bootstrap",
    "parse_dataset",
    "prepare_arm",
    "print_tables",
    "run_arm",
    "run_eval",
    "score",
    "summarize",
    "terminal_tables",
    "verdict",
    "wilson_interval",
    "write_html",
]
