"""The paired evaluation: what a constraint costs, measured on your own labelled data.

Constrained decoding makes invalid output unreachable, and can make wrong answers more likely
without a trace. The way to know is to run the same items through several ways of asking (the
arms, `sdk.eval.arms`) and score task accuracy and abstention, not validity, with statistics
that say when a difference is noise. `sdk eval DATASET --contract MODULE:NAME` on the command
line; `load_dataset` and `run_eval` here.
"""

from sdk.eval.arms import ARM_TITLES
from sdk.eval.arms import ARMS
from sdk.eval.arms import ArmUnavailable
from sdk.eval.arms import PreparedArm
from sdk.eval.arms import prepare_arm
from sdk.eval.arms import run_arm
from sdk.eval.dataset import DEFAULT_PROMPT
from sdk.eval.dataset import DatasetError
from sdk.eval.dataset import EvalItem
from sdk.eval.dataset import item_digest
from sdk.eval.dataset import load_dataset
from sdk.eval.dataset import parse_dataset
from sdk.eval.metrics import ArmMetrics
from sdk.eval.metrics import FieldScore
from sdk.eval.metrics import MassSummary
from sdk.eval.metrics import Outcome
from sdk.eval.metrics import arm_metrics
from sdk.eval.metrics import score
from sdk.eval.report import html_report
from sdk.eval.report import markdown_table
from sdk.eval.report import print_tables
from sdk.eval.report import terminal_tables
from sdk.eval.report import verdict
from sdk.eval.report import write_html
from sdk.eval.runner import RESULTS_FILE
from sdk.eval.runner import EvalRun
from sdk.eval.runner import Pair
from sdk.eval.runner import ResultsBusy
from sdk.eval.runner import ResumeMismatch
from sdk.eval.runner import load_results
from sdk.eval.runner import run_eval
from sdk.eval.runner import summarize
from sdk.eval.stats import Interval
from sdk.eval.stats import McNemar
from sdk.eval.stats import PairedDifference
from sdk.eval.stats import binomial_two_sided
from sdk.eval.stats import mcnemar_exact
from sdk.eval.stats import paired_bootstrap
from sdk.eval.stats import wilson_interval

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
    "ResultsBusy",
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
