"""`sdk demo`: real grammar-constrained generation with the bundled small model, offline."""

from __future__ import annotations

from typing import Annotated

import typer

from sdk.cli._app import app

__all__ = ["demo"]


@app.command(short_help="See it work offline: an invoice, a decision and SQL from a local model.")
def demo(
    model: Annotated[
        str | None,
        typer.Option(
            "--model",
            help="smollm2-135m (default, the local extra), gemma3-270m (the gemma extra) or a "
            "GGUF file.",
        ),
    ] = None,
) -> None:
    """Run the demo: real grammar-constrained generation with a small local model."""
    # Imported here: the demo needs the `local` extra, which the schema commands do not.
    from sdk.cli._demo import main as run_demo

    result = run_demo(model)
    if isinstance(result, int) and result:
        raise typer.Exit(result)
