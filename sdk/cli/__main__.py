"""`python -m sdk.cli`: the `sdk` command."""

from sdk.cli import main

main()
