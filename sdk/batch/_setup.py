"""A backend from names (the CLI's `--provider`, `--model`, `--base-url`), and back again.

A job's state file records these (never a key: hosted clients read theirs from the
environment, `ANTHROPIC_API_KEY` / `OPENAI_API_KEY`), so `sdk batch resume --state job.db`
rebuilds the same backend without being told again. Never a local server's credentials either:
a base URL with `user:password@` is kept as `https://***@host/...` (`BackendSpec.to_json`), and
the job is told it again (`--base-url` of `run`, `resume` and `retry`) to send anything there
(`spec_from`). A setting that the backend would not use (`--base-url` or `--concurrency` for a
hosted API, `--max-requests` for local calls, `--cache` for a hosted API) is refused, never
silently dropped.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Sequence
from dataclasses import asdict
from dataclasses import dataclass
from dataclasses import field
from dataclasses import replace
from typing import TYPE_CHECKING
from typing import Annotated
from typing import Any
from typing import Literal

from sdk._values.declared import AtLeast
from sdk._values.declared import Between
from sdk._values.declared import OptionalCount
from sdk._values.declared import check
from sdk._values.declared import check_fields
from sdk._values.profile import profile
from sdk.batch._errors import BatchError
from sdk.batch._hosted import AnthropicBatches
from sdk.batch._hosted import HostedBackend
from sdk.batch._hosted import OpenAIBatches
from sdk.batch._local import MOST_IN_FLIGHT
from sdk.batch._local import LocalBackend
from sdk.batch._ray import ACTORS
from sdk.batch._ray import DEFAULT_ACTORS
from sdk.batch._ray import RAY_ADDRESS
from sdk.providers._endpoint import Endpoint
from sdk.providers._endpoint import withheld
from sdk.providers._environment import MissingCredentials
from sdk.providers._environment import environment_client

if TYPE_CHECKING:
    from sdk.client import AsyncStructuredClient

__all__ = ["BackendSpec", "build_backend", "local_clients"]

LOCAL_PROVIDERS = ("llamacpp", "vllm", "ollama")
HOSTED_PROVIDERS = ("anthropic", "openai_responses", "openai_chat")
EMBEDDED = "embedded"


@dataclass(frozen=True)
class BackendSpec:
    """What a backend is built from: provider family, model, servers and limits."""

    provider: str
    model: str | None = None
    """The model's name; for `embedded`, a GGUF file (default: the bundled SmolLM2)."""
    base_urls: list[str] = field(default_factory=list)
    concurrency: Annotated[int | None, Between(1, MOST_IN_FLIGHT)] = None
    """Local servers: items in flight per server; embedded: in flight in this process (at most
    `MOST_IN_FLIGHT`, 10,000)."""
    max_requests: OptionalCount = None
    """Hosted: requests per batch, below the API's own limit."""
    retries: Annotated[int, AtLeast(0)] = 2
    """Local and embedded: the client's invalid-output retries (the job's `retries`; hosted
    follow-ups use the job's directly)."""
    cache: str | None = None
    """Local and embedded: the response cache's file (`sdk.cache.SQLiteCache`) the clients
    answer from and store into; `None`: no cache."""
    engine: Literal["local", "ray"] = "local"
    """Local and embedded: where the calls run: this process, or Ray actors (`RayBackend`)."""
    ray_address: RAY_ADDRESS = None
    """`engine="ray"`: the cluster's address (`None`: a local cluster for the run)."""
    actors: ACTORS = None
    """`engine="ray"`: the actor pool's size (None: `DEFAULT_ACTORS`)."""

    def __post_init__(self) -> None:
        check_fields(self)
        object.__setattr__(self, "provider", profile(self.provider).name)
        check_cache(self.provider, self.cache is not None)
        every = (*HOSTED_PROVIDERS, *LOCAL_PROVIDERS, EMBEDDED)
        if self.provider not in every:
            raise ValueError(f"batch jobs run on {', '.join(every)}, not {self.provider}")
        if self.provider not in ("llamacpp", EMBEDDED) and not self.model:
            raise ValueError(f"--model is required for {self.provider}")
        if self.provider in LOCAL_PROVIDERS and not self.base_urls:
            raise ValueError(f"--base-url is required for {self.provider} (one or more)")
        unused = [
            flag
            for flag, given, used in (
                ("--base-url", bool(self.base_urls), self.provider in LOCAL_PROVIDERS),
                (
                    "--concurrency",
                    self.concurrency is not None,
                    self.provider not in HOSTED_PROVIDERS,
                ),
                (
                    "--max-requests",
                    self.max_requests is not None,
                    self.provider in HOSTED_PROVIDERS,
                ),
                ("--engine ray", self.engine == "ray", self.provider not in HOSTED_PROVIDERS),
                ("--ray-address", self.ray_address is not None, self.engine == "ray"),
                ("--actors", self.actors is not None, self.engine == "ray"),
            )
            if given and not used
        ]
        if unused:
            raise ValueError(f"{' and '.join(unused)} cannot be used with {self.provider}")

    def to_json(self) -> dict[str, Any]:
        """As stored in the job's state file: each base URL without its credentials (`***@`
        in their place: `spec_from` takes them again)."""
        return {**asdict(self), "base_urls": [withheld(url) for url in self.base_urls]}

    def clients_json(self) -> dict[str, Any]:
        """As `local_clients` takes it: every value, the base URLs' credentials too (in memory
        only, never stored)."""
        return asdict(self)


def check_cache(provider: str, given: bool) -> None:
    """Refuse a response cache for a hosted batch API: the job hands its items to the API's
    own batches, not to a client's live calls, so there is no call a cache could answer."""
    if given and profile(provider).name in HOSTED_PROVIDERS:
        raise ValueError(
            f"--cache cannot be used with {profile(provider).name}: a hosted batch is "
            "answered by the provider's batch API, not by live calls the response cache "
            "could answer (use it with local servers or the embedded model)"
        )


def build_backend(spec: BackendSpec) -> HostedBackend | LocalBackend:
    """The backend a spec names (hosted clients read their keys from the environment; a
    missing key is a `BatchError` saying which variable to set)."""
    try:
        return _build(spec)
    except MissingCredentials as error:
        raise BatchError(str(error)) from error


def _build(spec: BackendSpec) -> HostedBackend | LocalBackend:
    limits = {"max_requests": spec.max_requests} if spec.max_requests else {}
    model = spec.model or ""
    if spec.provider == "anthropic":
        from sdk.providers.anthropic import AnthropicProvider

        client = environment_client("anthropic")
        return AnthropicBatches(AnthropicProvider(client, model=model), **limits)
    if spec.provider in ("openai_responses", "openai_chat"):
        from sdk.providers.openai import OpenAIChatProvider
        from sdk.providers.openai import OpenAIResponsesProvider

        kind = OpenAIChatProvider if spec.provider == "openai_chat" else OpenAIResponsesProvider
        return OpenAIBatches(kind(environment_client("openai"), model=model), **limits)
    clients = local_clients(spec.clients_json())
    if spec.engine == "ray":
        from sdk.batch._ray import RayBackend

        actors = spec.actors or DEFAULT_ACTORS
        per_server = spec.concurrency or (1 if spec.provider == EMBEDDED else 16)
        in_actor = max(1, math.ceil(per_server / actors))  # the cluster's, not each actor's
        actor_spec = {**spec.clients_json(), "concurrency": in_actor}
        return RayBackend(
            clients,
            functools.partial(local_clients, actor_spec),
            address=spec.ray_address,
            actors=actors,
            in_flight=in_actor * max(1, len(spec.base_urls)),
        )
    return LocalBackend(clients)


def local_clients(spec: dict[str, Any]) -> list[AsyncStructuredClient]:
    """The clients of a local or embedded spec (as `BackendSpec.clients_json` gives it): one per
    server, or one in-process client of the embedded model. A module-level function of plain
    data, so that a partial of it pickles: each Ray actor makes its own clients with it."""
    from sdk.cache import BestEffortCache
    from sdk.cache import SQLiteCache
    from sdk.client import AsyncStructuredClient

    named = BackendSpec(**spec)
    # Shared by the clients; a damaged cache (or one damaged since the job began) is given up
    # with one warning, and the items run without it.
    path = named.cache
    store = BestEffortCache(lambda: SQLiteCache(path)) if path is not None else None
    if named.provider == EMBEDDED:
        from sdk.providers.embedded import EmbeddedProvider

        return [
            AsyncStructuredClient(
                EmbeddedProvider(named.model),
                retries=named.retries,
                max_concurrency=named.concurrency or 1,
                cache=store,
            )
        ]
    return [
        AsyncStructuredClient(
            _local_provider(named.provider, url, named.model),
            retries=named.retries,
            max_concurrency=named.concurrency or 16,
            cache=store,
        )
        for url in named.base_urls
    ]


def _local_provider(kind: str, url: str, model: str | None) -> Any:
    if Endpoint.of(url).withheld:  # never sent as if `***` were a user name
        raise ValueError(_needs_credentials([url]))
    if kind == "llamacpp":
        from sdk.providers.llamacpp import LlamaCppProvider

        return LlamaCppProvider(url, model=model)
    if kind == "vllm":
        from sdk.providers.vllm import VLLMProvider

        return VLLMProvider(url, model=model or "")
    from sdk.providers.ollama import OllamaProvider

    return OllamaProvider(url, model=model or "")


def spec_from(
    data: dict[str, Any],
    overrides: Sequence[tuple[str, Any]] = (),
    *,
    base_urls: Sequence[str] = (),
    sending: bool = True,
) -> BackendSpec:
    """A stored spec, with any values given again on the command line (`overrides`, `run`'s:
    given base URLs replace the stored ones), and `base_urls` given again for the job's own
    servers (`resume`, `retry`): each takes the place of the stored URL of the same server (as
    `Endpoint.same_server` says), giving back the credentials the state file withheld; a URL of
    another server is a `ValueError`. A stored URL whose credentials were withheld and that is
    given no URL again is a `ValueError` naming the server, before anything is sent; with
    `sending=False` (`cancel`, which sends nothing to a local server) it becomes the server's
    URL without credentials instead. A stored `ray_address` Ray cannot take (a job made
    before addresses were checked) is a `ValueError` saying to give `--ray-address` again;
    with `sending=False` it is left out (the job's cancel needs no cluster)."""
    values = dict(data)
    values.update((key, value) for key, value in overrides if value)
    _usable_address(values, sending)
    stored = [str(url) for url in values.get("base_urls") or []]
    if base_urls:
        values["base_urls"] = _given_again(stored, base_urls, _added_path(values["provider"]))
    missing = [url for url in values.get("base_urls") or [] if Endpoint.of(url).withheld]
    if missing and sending:
        raise ValueError(_needs_credentials(missing))
    if missing:
        values["base_urls"] = [
            Endpoint.of(url).shown if url in missing else url for url in values["base_urls"]
        ]
    return BackendSpec(**values)


def _usable_address(values: dict[str, Any], sending: bool) -> None:
    """Refuse (or, not sending, drop) a stored `ray_address` that is not a cluster's address,
    saying how to go on: `--ray-address` of `run`, `resume` or `retry` replaces it."""
    try:
        check("ray_address", values.get("ray_address"), RAY_ADDRESS)
    except (TypeError, ValueError) as error:
        if not sending:
            values["ray_address"] = None
            return
        raise ValueError(
            f"the job's {error}: give it one with --ray-address (`sdk batch resume --state "
            "STATE --ray-address ADDRESS`, or `retry`; the new address is recorded in the job)"
        ) from None


def with_retries(spec: BackendSpec, retries: int) -> BackendSpec:
    """`spec` with the job's `retries` (its base URLs' credentials kept)."""
    return replace(spec, retries=retries)


def _added_path(provider: str) -> str:
    """The path suffix a local provider adds to its base URL itself (vLLM's `/v1`): two URLs
    that differ by it name one server."""
    if provider == "vllm":
        from sdk.providers.vllm import VLLMProvider

        return VLLMProvider.added_path
    return ""


def _given_again(stored: list[str], given: Sequence[str], added_path: str) -> list[str]:
    servers = [Endpoint.of(url, strip_path=added_path) for url in stored]
    mine = [(Endpoint.of(url, strip_path=added_path), url) for url in given]
    others = [
        endpoint.shown for endpoint, _ in mine if not any(endpoint.same_server(s) for s in servers)
    ]
    if others:
        jobs = ", ".join(dict.fromkeys(server.shown for server in servers)) or "none"
        raise ValueError(
            f"--base-url {', '.join(others)} is not a server of the job (its servers: {jobs}): "
            "give each of the job's servers again, with its credentials; to run it on other "
            "servers, use `sdk batch run` with the job's files and --base-url"
        )
    return [
        next((url for endpoint, url in mine if endpoint.same_server(server)), stored[index])
        for index, server in enumerate(servers)
    ]


def _needs_credentials(urls: Sequence[str]) -> str:
    names = ", ".join(dict.fromkeys(Endpoint.of(url).shown for url in urls))
    return (
        f"the job's state file does not keep the credentials of {names}: give --base-url "
        "again with them (https://user:password@host/..., ?key=...)"
    )
