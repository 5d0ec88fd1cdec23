"""The `sdk` command: exit codes, messages, and plain output when not on a terminal."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from sdk.cli import app
from sdk.workflow.versioning import discover
from sdk.workflow.versioning import export
from tests.schema_support import REPO
from tests.schema_support import make_package

runner = CliRunner()

BAD = '''
from pydantic import Field
from sdk import Contract


class Bad(Contract):
    """An extraction with nowhere to say "not stated"."""

    price: float = Field(description="The price.")
    summary: str = Field(description="A summary.")
'''


def _invoke(*args: str) -> tuple[int, str, str]:
    result = runner.invoke(app, list(args))
    assert "\x1b[" not in result.output  # plain text: the runner is not a terminal
    return result.exit_code, result.stdout, result.stderr


def test_check_passes_on_the_reference_contracts() -> None:
    code, out, _ = _invoke("schema", "check", "contracts")
    assert code == 0
    assert out == "contracts: 7 contracts and 1 grammar match the lock\n"


def test_check_json() -> None:
    code, out, _ = _invoke("schema", "check", "contracts", "--json")
    assert code == 0
    assert json.loads(out) == {"ok": True, "findings": []}


def test_check_fails_with_the_contract_and_the_reason(tmp_path: Path) -> None:
    first = make_package(tmp_path / "src", {"models.py": BAD})
    folder = tmp_path / "schemas"
    assert _invoke("schema", "lock", first, "--dir", str(folder))[0] == 0
    changed = make_package(tmp_path / "src", {"models.py": BAD.replace("The price.", "Price.")})
    code, out, _ = _invoke("schema", "check", changed, "--dir", str(folder))
    assert code == 1
    lines = out.splitlines()
    assert lines[0].startswith("changed-without-bump: Bad v1 changed without a version bump")
    assert lines[1] == (
        '    description-changed /properties/price: description: "The price." -> "Price."'
    )
    assert lines[-1] == "1 problem(s): the schemas of " + changed + " do not match the lock"


def test_lock_refuses_a_changed_locked_version(tmp_path: Path) -> None:
    first = make_package(tmp_path / "src", {"models.py": BAD})
    folder = tmp_path / "schemas"
    code, out, _ = _invoke("schema", "lock", first, "--dir", str(folder))
    assert code == 0 and "locked Bad v1" in out
    changed = make_package(tmp_path / "src", {"models.py": BAD.replace("A summary.", "Short.")})
    code, _, err = _invoke("schema", "lock", changed, "--dir", str(folder))
    assert code == 1
    assert "error: Bad v1 is locked with another fingerprint" in err


def test_lint_is_clean_on_the_reference_contracts_for_every_provider() -> None:
    for extra in ([], ["--provider", "anthropic"], ["--provider", "openai_strict"]):
        code, out, _ = _invoke("schema", "lint", "contracts", *extra)
        assert code == 0, out
        assert re.fullmatch(r"0 finding\(s\) in 7 contracts, \d+ suppressed", out.splitlines()[-1])


def test_lint_shows_suppressions_with_their_reasons() -> None:
    code, out, _ = _invoke("schema", "lint", "contracts", "--show-suppressed")
    assert code == 0
    assert (
        "Decision /properties/answer: enum-no-escape (suppressed): escalate is this enum's "
        "abstention path" in out
    )


def test_lint_fails_with_code_pointer_and_fix(tmp_path: Path) -> None:
    name = make_package(tmp_path, {"models.py": BAD})
    code, out, _ = _invoke("schema", "lint", name)
    assert code == 1
    assert "Bad /properties/price: no-abstention: required number 'price' cannot be null" in out
    assert "    fix: make it nullable (`float | None`" in out
    assert out.splitlines()[-1] == "1 finding(s) in 1 contracts, 0 suppressed"


def test_lint_json(tmp_path: Path) -> None:
    name = make_package(tmp_path, {"models.py": BAD})
    code, out, _ = _invoke("schema", "lint", name, "--json")
    assert code == 1
    (report,) = json.loads(out)
    assert report["contract"] == "Bad"
    assert [f["code"] for f in report["findings"]] == ["no-abstention"]


def test_lint_with_an_unknown_provider_is_a_usage_error() -> None:
    code, _, err = _invoke("schema", "lint", "contracts", "--provider", "nope")
    assert code == 2
    assert "unknown provider 'nope'" in err


def test_an_unimportable_package_is_a_usage_error() -> None:
    code, _, err = _invoke("schema", "check", "no_such_package_here")
    assert code == 2
    assert "No module named 'no_such_package_here'" in err


def test_diff_of_two_files(tmp_path: Path) -> None:
    old = json.loads((REPO / "contracts" / "schemas" / "Sentiment.v1.json").read_text())
    new = json.loads(json.dumps(old))
    new["properties"]["sentiment"]["enum"].remove("mixed")
    new["x-schema-version"] = 2
    (tmp_path / "old.json").write_text(json.dumps(old))
    (tmp_path / "new.json").write_text(json.dumps(new))
    code, out, _ = _invoke("schema", "diff", str(tmp_path / "old.json"), str(tmp_path / "new.json"))
    assert code == 0
    lines = out.splitlines()
    assert lines[0].startswith("Sentiment v1 (0501ac6f2e78) -> Sentiment v2 (")
    assert lines[1] == "  1 change(s), breaking for producers and consumers"
    assert lines[2] == '  enum-member-removed /properties/sentiment: member "mixed" removed'
    assert lines[3].startswith("      producers breaking, consumers breaking: ")
    code, _, _ = _invoke(
        "schema",
        "diff",
        str(tmp_path / "old.json"),
        str(tmp_path / "new.json"),
        "--fail-on-breaking",
    )
    assert code == 1
    code, out, _ = _invoke(
        "schema", "diff", str(tmp_path / "old.json"), str(tmp_path / "new.json"), "--json"
    )
    (data,) = json.loads(out)
    assert data["changes"][0]["kind"] == "enum-member-removed"


def test_diff_a_snapshot_against_a_contract_in_code() -> None:
    snapshot = str(REPO / "contracts" / "schemas" / "Decision.v1.json")
    code, out, _ = _invoke("schema", "diff", snapshot, "contracts.decision:Decision")
    assert code == 0
    assert out.splitlines()[1] == "  identical"


def test_diff_against_the_lock() -> None:
    code, out, _ = _invoke("schema", "diff", "--against-lock", "contracts")
    assert code == 0
    assert out.count("  identical") == 8  # seven contracts and the SelectQuery grammar


def test_diff_needs_two_schemas_or_the_lock() -> None:
    code, _, err = _invoke("schema", "diff", "only_one.json")
    assert code == 2
    assert "give OLD and NEW, or --against-lock" in err


# A verdict whose outcome is a tagged union; `OUTCOME` is how the union is declared.
VERDICT = """
from typing import Annotated, Any, Literal

from pydantic import Discriminator, Field, Tag
from sdk import Contract


class Approve(Contract):
    \"\"\"Approve the request.\"\"\"

    kind: Literal["approve"] = Field(default="approve", description="The outcome's tag.")
    note: str = Field(default="", description="A note for the requester.")


class Reject(Contract):
    \"\"\"Reject the request.\"\"\"

    kind: Literal["reject"] = Field(default="reject", description="The outcome's tag.")
    reason: str = Field(default="", description="Why it is rejected.")


def pick(value: Any) -> Any:
    return value.get("kind") if isinstance(value, dict) else value.kind


class Verdict(Contract):
    \"\"\"A verdict on a request.\"\"\"

    schema_version = VERSION

    outcome: OUTCOME = Field(description="The outcome.")
"""
BY_NAME = 'Annotated[Approve | Reject, Field(discriminator="kind")]'
BY_FUNCTION = (
    'Annotated[Annotated[Approve, Tag("approve")] | Annotated[Reject, Tag("reject")], '
    "Discriminator(pick)]"
)


REMOVED = 'discriminator-removed /properties/outcome: discriminator "kind" removed'
ADDED = 'discriminator-added /properties/outcome: discriminator "kind" added'


def _verdict_failing_on_breaking(tmp_path: Path, old: str, new: str) -> list[str]:
    """`schema diff --against-lock --fail-on-breaking` from the Verdict whose outcome is `old`
    (locked) to one whose outcome is `new`: it must exit 1; the lines of its Verdict report."""
    folder = str(tmp_path / "schemas")
    first = make_package(
        tmp_path / "src", {"models.py": VERDICT.replace("OUTCOME", old).replace("VERSION", "1")}
    )
    assert _invoke("schema", "lock", first, "--dir", folder)[0] == 0
    second = make_package(
        tmp_path / "src", {"models.py": VERDICT.replace("OUTCOME", new).replace("VERSION", "2")}
    )
    args = ("schema", "diff", "--against-lock", second, "--dir", folder, "--fail-on-breaking")
    code, out, _ = _invoke(*args)
    assert code == 1
    return out[out.index("Verdict v1") :].splitlines()


@pytest.mark.parametrize(
    ("old", "new", "line"),
    [
        (BY_NAME, BY_FUNCTION, REMOVED),
        (BY_FUNCTION, BY_NAME, ADDED),
        (BY_NAME, "Approve | Reject", f"{REMOVED} (oneOf -> anyOf)"),
        ("Approve | Reject", BY_NAME, f"{ADDED} (anyOf -> oneOf)"),
    ],
    ids=["removed-same-oneOf", "added-same-oneOf", "removed", "added"],
)
def test_diff_fails_on_a_discriminator_added_or_removed(
    tmp_path: Path, old: str, new: str, line: str
) -> None:
    # The same branches either way: only how a value picks its branch changed. Under the same
    # `oneOf` that was "0 change(s)"; with the keyword it was a compatible loosening or a
    # tightening. Each is breaking now, so --fail-on-breaking stops the build.
    verdict = _verdict_failing_on_breaking(tmp_path, old, new)
    assert verdict[1] == "  1 change(s), breaking for producers" + (
        " and consumers" if line.startswith(ADDED) else ""
    )
    assert verdict[2] == f"  {line}"


@pytest.mark.parametrize(
    ("old", "new", "lines"),
    [
        (
            "Approve",
            BY_NAME,
            [
                f"{ADDED} (one alternative -> oneOf)",
                'type-widened /properties/outcome: alternative kind="reject" (#/$defs/Reject) '
                "added",
            ],
        ),
        (
            BY_NAME,
            "Approve",
            [
                f"{REMOVED} (oneOf -> one alternative)",
                'type-narrowed /properties/outcome: alternative kind="reject" (#/$defs/Reject) '
                "removed",
            ],
        ),
    ],
    ids=["grown-into-a-tagged-union", "narrowed-to-one-contract"],
)
def test_diff_fails_on_a_discriminator_that_comes_or_goes_with_the_union(
    tmp_path: Path, old: str, new: str, lines: list[str]
) -> None:
    # `Approve`'s tag has a default: a lone Approve read an output without the tag, the tagged
    # union refuses it. Growing into the union was only a compatible `type-widened` (exit 0).
    verdict = _verdict_failing_on_breaking(tmp_path, old, new)
    assert verdict[1] == "  2 change(s), breaking for producers and consumers"
    # Each change's line, then its judgment indented under it.
    assert verdict[2] == f"  {lines[0]}" and verdict[4] == f"  {lines[1]}"
    assert verdict[3].startswith("      producers breaking, consumers ")


def test_export_writes_the_committed_snapshot_bytes(tmp_path: Path) -> None:
    code, out, _ = _invoke("schema", "export", "contracts", "--out", str(tmp_path))
    assert code == 0
    assert out.splitlines()[-1] == "7 schemas exported from contracts"
    committed = REPO / "contracts" / "schemas"
    for path in export(discover("contracts"), tmp_path):
        assert path.read_bytes() == (committed / path.name).read_bytes()


def test_python_dash_m_sdk_cli_works() -> None:
    result = subprocess.run(
        [sys.executable, "-m", "sdk.cli", "schema", "check", "contracts"],
        cwd=REPO,
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout == "contracts: 7 contracts and 1 grammar match the lock\n"


def test_demo_and_eval_take_a_model_by_name_or_file_and_refuse_an_unknown_one(
    tmp_path: Path,
) -> None:
    """`--model` names a known embedded model or a GGUF file: anything else is refused with
    the known names, before any model is loaded: a bad argument (exit 2), one `error:` line on
    stderr, as eval, batch and serve refuse it (the demo said it on stdout, without `error:`)."""
    missing = tmp_path / "no-such-model.gguf"
    demo = runner.invoke(app, ["demo", "--model", str(missing)], env={"NO_COLOR": "1"})
    assert (demo.exit_code, demo.stdout) == (2, "")
    assert demo.stderr.startswith(f"error: no GGUF model file at {missing}")
    assert demo.stderr.count("\n") == 1
    assert "smollm2-135m" in demo.stderr and "gemma3-270m" in demo.stderr
    dataset = tmp_path / "d.jsonl"
    dataset.write_text('{"id": "a", "document": "x", "expected": {"answer": "approve"}}\n')
    evaluated = runner.invoke(
        app,
        ["eval", str(dataset), "--contract", "contracts:Decision", "--model", str(missing),
         "--out", str(tmp_path / "out")],
    )  # fmt: skip
    assert evaluated.exit_code != 0 and "no GGUF model file" in evaluated.output


def test_lock_fails_on_an_older_versions_edited_snapshot_as_check_does(tmp_path: Path) -> None:
    folder = tmp_path / "schemas"
    first = make_package(tmp_path / "src", {"models.py": BAD})
    assert _invoke("schema", "lock", first, "--dir", str(folder))[0] == 0
    bumped = BAD.replace("    price: float", "    schema_version = 2\n\n    price: float")
    second = make_package(tmp_path / "src", {"models.py": bumped.replace("A summary.", "Short.")})
    assert _invoke("schema", "lock", second, "--dir", str(folder))[0] == 0
    snapshot = folder / "Bad.v1.json"
    snapshot.write_text(snapshot.read_text().replace("The price.", "Price."))

    code, out, _ = _invoke("schema", "check", second, "--dir", str(folder))
    assert code == 1 and out.startswith("snapshot-mismatch: Bad v1: snapshot ")
    code, out, err = _invoke("schema", "lock", second, "--dir", str(folder))
    assert code == 1  # it used to exit 0 saying "nothing written"
    assert "nothing written" not in out
    assert err.startswith("error: Bad v1: snapshot ")
    assert "restore it from version control" in err


@pytest.mark.parametrize(
    ("provider", "variable"),
    [
        ("anthropic:claude-sonnet-4-6", "ANTHROPIC_API_KEY"),
        ("openai:gpt-4.1-mini", "OPENAI_API_KEY"),
    ],
)
def test_sdk_eval_without_a_hosted_key_says_which_variable_to_set(
    provider: str, variable: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # On main: OpenAI's client raised its own error as a traceback; Anthropic's was made
    # without a key, and every item became an "unusable reply" with the advice to resume.
    for name in ("ANTHROPIC_API_KEY", "ANTHROPIC_AUTH_TOKEN", "OPENAI_API_KEY", "OPENAI_ADMIN_KEY"):
        monkeypatch.delenv(name, raising=False)
    dataset = REPO / "examples" / "data" / "eval" / "decisions.jsonl"
    out = tmp_path / "run"
    result = runner.invoke(
        app, ["eval", str(dataset), "--contract", "contracts:Decision", "--provider", provider,
              "--out", str(out)],
    )  # fmt: skip
    assert result.exit_code == 2, (result.output, result.exception)
    assert variable in result.output and "resume" not in result.output
    assert not (out / "results.json").exists()


def test_hosted_clients_made_from_the_environment_take_credentials_the_vendor_finds(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Workload identity: no API key, and the Anthropic client finds credentials of its own
    # (the check that moved to `environment_client` dropped them: "set ANTHROPIC_API_KEY").
    from sdk.providers._environment import MissingCredentials
    from sdk.providers._environment import environment_client

    for name in ("ANTHROPIC_API_KEY", "ANTHROPIC_AUTH_TOKEN"):
        monkeypatch.delenv(name, raising=False)
    with pytest.raises(MissingCredentials, match="ANTHROPIC_API_KEY"):
        environment_client("anthropic")
    monkeypatch.setenv("ANTHROPIC_IDENTITY_TOKEN", "a-token")
    monkeypatch.setenv("ANTHROPIC_FEDERATION_RULE_ID", "a-rule")
    monkeypatch.setenv("ANTHROPIC_ORGANIZATION_ID", "an-org")
    assert environment_client("anthropic").credentials is not None


@pytest.mark.parametrize("vendor", ["openai", "anthropic"])
def test_a_key_of_only_spaces_is_refused_like_a_missing_one(
    monkeypatch: pytest.MonkeyPatch, vendor: str
) -> None:
    # probe12c D11: OPENAI_API_KEY=" " was taken as a key, and the call failed after retries.
    from sdk.providers._environment import MissingCredentials
    from sdk.providers._environment import environment_client

    pytest.importorskip(vendor)
    variable = f"{vendor.upper()}_API_KEY"
    monkeypatch.setenv(variable, "  ")
    with pytest.raises(MissingCredentials, match=f"{variable} is set but blank"):
        environment_client("openai" if vendor == "openai" else "anthropic")
