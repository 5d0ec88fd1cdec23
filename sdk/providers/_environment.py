"""The hosted vendors' clients made from the environment, as the CLI makes them
(`--provider anthropic:MODEL`, `sdk batch run --provider openai_chat`): the vendor's SDK reads
its key from a variable, and a missing one is said before anything runs, naming the variable
(the Anthropic client is made without one and fails at its first request; the OpenAI client's
own error would be a traceback)."""

from __future__ import annotations

import os
from typing import Any
from typing import Literal

__all__ = ["MissingCredentials", "environment_client"]

Vendor = Literal["anthropic", "openai"]


class MissingCredentials(ValueError):
    """A hosted vendor's client found no credentials in the environment."""


def environment_client(vendor: Vendor) -> Any:
    """`anthropic.Anthropic()` or `openai.OpenAI()` (`ImportError` when the extra is not
    installed); `MissingCredentials` naming the variable to set when the client has none, or
    when the variable holds only spaces."""
    variable = f"{vendor.upper()}_API_KEY"  # (what each vendor's client reads its key from)
    given = os.environ.get(variable, "")
    if given and not given.strip():
        # (spaces are no key: the OpenAI client took " " as one, and every call failed after
        # its retries; an empty variable is the vendor client's to judge, which may find
        # credentials of its own)
        raise MissingCredentials(f"{vendor}: {variable} is set but blank: set it to your key")
    try:
        if vendor == "anthropic":
            import anthropic

            client: Any = anthropic.Anthropic()
            # (a key, a token, or credentials the client found itself: workload identity, a
            # profile)
            if not any(
                getattr(client, name, None) for name in ("api_key", "auth_token", "credentials")
            ):
                raise MissingCredentials(f"anthropic: no credentials: set {variable}")
            return client
        import openai

        return openai.OpenAI()
    except (ImportError, MissingCredentials):
        raise
    except Exception as error:  # the vendor's own error, made without a key
        if type(error).__module__.split(".")[0] != vendor:
            raise
        raise MissingCredentials(
            f"{vendor}: cannot make a client ({variable} set?): {error}"
        ) from error
