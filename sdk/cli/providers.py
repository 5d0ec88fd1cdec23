"""`sdk providers`: every provider family the SDK knows, from the profiles registry."""

from __future__ import annotations

from typing import Any

from sdk._values.profile import Profile
from sdk._values.profile import profiles
from sdk.cli._app import JsonOption
from sdk.cli._app import Output
from sdk.cli._app import app
from sdk.cli._app import errors_exit

__all__ = ["providers_command"]


@app.command(
    "providers",
    short_help="List the provider families: names for --provider, dialects, what each carries.",
)
def providers_command(as_json: JsonOption = False) -> None:
    """List every provider family the SDK knows (its own, and those installed packages declare
    or a module registered): the name and aliases `--provider` takes, the schema dialect, what
    its wire carries and how, and whether its usage is priced."""
    out = Output()
    with errors_exit(out):
        found = profiles()
    if as_json:
        out.json([_described(each) for each in found])
        return
    for each in found:
        aliases = f" (also: {', '.join(sorted(each.aliases))})" if each.aliases else ""
        out.parts((each.name, "bold"), (f"  {each.display_name}{aliases}", None))
        dialect = each.dialect.name if each.dialect is not None else "none (canonical schema)"
        priced = f"yes ({each.pricing.provider_id})" if each.pricing is not None else "no"
        out.line(f"    dialect: {dialect}; priced: {priced}", "dim")
        for kind, how in each.carries.items():
            out.line(f"    {kind}: {how}", "dim")


def _described(each: Profile) -> dict[str, Any]:
    return {
        "name": each.name,
        "display_name": each.display_name,
        "aliases": sorted(each.aliases),
        "dialect": each.dialect.name if each.dialect is not None else None,
        "carries": dict(each.carries),
        "priced": each.pricing is not None,
        "stop_reasons": {raw: str(stop) for raw, stop in (each.stop_reasons or {}).items()},
        "provider": each.provider,
    }
