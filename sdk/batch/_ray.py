"""The Ray engine of a local job: `sdk batch run --engine ray [--ray-address ADDRESS]`.

The job is the local runner's: the same state file, input index, output protocol, lock and
lease, exit codes, `resume`, `retry` and `cancel`. Only where the calls run changes: the driver
(this process) reads the pending items a page at a time, checks each line's identity as the local
runner does, and hands the page to a Ray dataset whose `StructuredMap` actors (`sdk.ray`) make
the calls, each holding its own clients and many calls in flight. Each item comes back with the
decision the local runner would have made (`decide_live`: its output line, or back to pending
for a provider failure while `resubmits` allow), and the driver commits those decisions a batch
at a time, fenced by its lease, exactly as the local runner commits its own.

The driver waits for the actors' batches at most half a second at a time (they are read in a
thread of its own): between two, it renews the lease and looks at the input and the cancel flag,
as the local runner does every tick, so an edited input or a cancel stops the job within a
second even while the servers hold every answer.

So nothing is lost or written twice whatever the cluster does: an actor killed mid-job is
restarted by Ray and its batch run again (Ray Data retries an actor's tasks), and an item is
committed only while it is still pending in this page (a batch that comes back twice is
committed once). A driver that dies loses the calls in flight, as a local runner does; `resume`
sends them again. Without an address, a local cluster is started for the run and stopped after.
"""

from __future__ import annotations

import contextlib
import ctypes
import json
import logging
import math
import os
import queue
import re
import socket
import threading
import time
from collections.abc import Callable
from collections.abc import Iterable
from collections.abc import Iterator
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Annotated
from typing import Any
from typing import TypedDict
from typing import Unpack

from sdk import _fork
from sdk._values.declared import Count
from sdk._values.declared import OptionalCount
from sdk._values.declared import check
from sdk._values.declared import check_given
from sdk.batch._local import LocalBackend
from sdk.batch._outcome import Decision
from sdk.batch._outcome import JobSettings
from sdk.batch._state import ItemRow
from sdk.batch._state import ItemUpdate
from sdk.client import AsyncStructuredClient
from sdk.contract import Contract
from sdk.prompt import Prompt

__all__ = [
    "ACTORS",
    "DEFAULT_ACTORS",
    "RAY_ADDRESS",
    "RayAddress",
    "RayBackend",
    "RayLayout",
    "RayRun",
]

ClientFactory = Callable[[], Sequence[AsyncStructuredClient]]
_PROBE_SECONDS = 5.0
"""How long a cluster's address may take to accept a connection before it is refused."""


_HOST_PORT = re.compile(
    r"(?:ray://)?(?:\[[0-9A-Fa-f:.]+(?:%[\w.-]+)?\]|[A-Za-z0-9_.-]+):(?P<port>[0-9]{1,5})"
)
_MODULE_ADDRESS = re.compile(r"(?P<module>[A-Za-z_][A-Za-z0-9_.]*)://\S+")
"""`module://...`: Ray hands the address to that module's `ClientBuilder` (`anyscale://...`)."""
_NOT_MODULES = frozenset({"http", "https", "ray"})  # (`ray://` is Ray Client's HOST:PORT)


@dataclass(frozen=True, slots=True)
class RayAddress:
    """A Ray cluster's address in a form `ray.init(address=...)` takes (a `Bound` of
    `sdk._values.declared`): `auto` (the cluster this machine runs), `local` (a new local
    one), the head's `HOST:PORT` (`[IPv6]:PORT`), `ray://HOST:PORT` (Ray Client) or
    `module://...` (a module's own client builder, `anyscale://cluster`). Anything else
    (`""`, `notaurl:::`, an http URL) `ray.init` refuses only when the run starts, after the
    job was made: so it is refused where it is set."""

    @property
    def text(self) -> str:
        return (
            "auto, local, HOST:PORT, ray://HOST:PORT or module://... (a Ray cluster's address)"
        )

    def holds(self, value: Any) -> bool:
        if value in ("auto", "local"):
            return True
        module = _MODULE_ADDRESS.fullmatch(value)
        if module is not None and module["module"] not in _NOT_MODULES:
            return True
        found = _HOST_PORT.fullmatch(value)
        return found is not None and 0 < int(found["port"]) < 65536

    @property
    def outside(self) -> object:
        return "notaurl:::"


RAY_ADDRESS = Annotated[str | None, RayAddress()]
"""A job's `--ray-address` (`None`: a local cluster for the run)."""
ACTORS = OptionalCount
"""The actor pool's size (`None`: `DEFAULT_ACTORS`): `RayLayout.actors`, and a job's
`--actors` (`BackendSpec.actors`)."""
DEFAULT_ACTORS = 2
"""The actor pool's size when none is given."""


class RayLayout(TypedDict, total=False):
    """Where and how a job's calls run on Ray: `RayBackend`'s keywords, each optional."""

    address: RAY_ADDRESS
    """A running cluster (None, the default: a local one for the run)."""
    actors: ACTORS
    """The actor pool's size (None, the default: `DEFAULT_ACTORS`)."""
    in_flight: Count
    """Calls at once per actor (default 16)."""
    batch_size: Count
    """Items per actor call (default 64)."""
    page: Count
    """Items the driver hands to one dataset; its memory holds their lines (default 20,000)."""


class RayBackend(LocalBackend):
    """A local job's calls on a Ray cluster (see the module docstring).

    `clients`: the driver's own clients (what the job checks: provider, model, retries; the
    driver makes no call with them). `make_clients`: a picklable function that makes an actor's
    clients, run once per actor. `layout`: the cluster, the actors and their batches
    (`RayLayout`).
    """

    def __init__(
        self,
        clients: Sequence[AsyncStructuredClient],
        make_clients: ClientFactory,
        **layout: Unpack[RayLayout],
    ) -> None:
        check_given(layout, RayLayout, "RayBackend()")  # each setting, naming it
        address, actors = layout.get("address"), layout.get("actors") or DEFAULT_ACTORS
        _require_ray()  # here, before a job's files are made, and not at the run's first page
        _probe(address if address not in (None, "auto") else _environment_address())
        in_flight, batch_size = layout.get("in_flight", 16), layout.get("batch_size", 64)
        page = layout.get("page", 20_000)
        super().__init__(list(clients), concurrency=actors * in_flight)
        self.make_clients = make_clients
        self.address = address
        self.actors = actors
        self.in_flight = 0
        self.per_actor = in_flight
        self.batch_size = batch_size
        self.page = page

    @contextlib.contextmanager
    def cluster(self) -> Iterator[None]:
        """Ray, connected for the run: the cluster at `address`, or a local one started here
        (and stopped after); a Ray already initialized in this process is used as it is."""
        import ray
        from ray.data import DataContext

        started = not ray.is_initialized()
        if started:
            ray.init(
                address=self.address,
                include_dashboard=False,
                log_to_driver=False,
                logging_level=logging.WARNING,
            )
        context = DataContext.get_current()
        bars, context.enable_progress_bars = context.enable_progress_bars, False
        quiet = logging.getLogger("ray.data")
        level = quiet.level
        quiet.setLevel(logging.WARNING)  # the job's own progress line says how far it is
        try:
            yield
        finally:
            quiet.setLevel(level)
            context.enable_progress_bars = bars
            if started:
                ray.shutdown()


def _require_ray() -> None:
    """Ray Data can be imported, or an `ImportError` naming the extra (the CLI's exit 2)."""
    try:
        import ray.data  # noqa: F401
    except ImportError as missing:
        raise ImportError(
            f"--engine ray needs the ray extra: pip install 'structured-sdk[ray]' ({missing})"
        ) from missing


def _environment_address() -> str | None:
    """The `RAY_ADDRESS` variable `ray.init` reads when it is given no address (or `auto`),
    checked as `--ray-address` is (a `ValueError` naming the variable), or `None`."""
    given = os.environ.get("RAY_ADDRESS") or None
    check("RAY_ADDRESS", given, RAY_ADDRESS, "the environment")
    return given


def _probe(address: str | None) -> None:
    """A `ValueError` (the CLI's exit 2) when nothing listens at a cluster's `host:port` (or
    `ray://host:port`): `ray.init` would retry for ever there. An address naming no host
    (`auto`, `local`, none, `module://...`) is Ray's to find; one that answers is Ray's to
    judge."""
    if address is None or ("://" in address and not address.startswith("ray://")):
        return  # (none given, or a module's address: its client builder's to reach)
    host, colon, port = address.removeprefix("ray://").rpartition(":")
    if not colon or not port.isdigit():
        return
    try:
        with socket.create_connection((host.strip("[]"), int(port)), timeout=_PROBE_SECONDS):
            pass
    except OSError as error:
        raise ValueError(f"no Ray cluster answers at {address}: {error}") from None


@dataclass
class RayRun:
    """One pass over the pending items on Ray: `line` reads an item's checked input line,
    `commit` commits decisions, `stop()` says the job was cancelled, `tick()` renews the lease
    and reports. `run` returns whether the pass was stopped by a cancel."""

    backend: RayBackend
    contract: type[Contract]
    settings: JobSettings
    line: Callable[[ItemRow], bytes]
    commit: Callable[[list[Decision]], None]
    stop: Callable[[], bool]
    tick: Callable[[], None]
    prompt: type[Prompt] | None = None
    """The job's prompt template: each line's `variables` are rendered in the actor."""
    tick_seconds: float = 0.5
    """The longest the driver waits for a batch before it ticks (the local runner's tick)."""

    def run(self, pages: Iterator[list[ItemRow]]) -> bool:
        return any(self._page(page) for page in pages)

    def _page(self, page: list[ItemRow]) -> bool:
        import ray
        from ray.data import ActorPoolStrategy

        from sdk.batch._map import JobRows
        from sdk.batch._map import StructuredMap

        rows = [self._row(row) for row in page]  # a changed line stops the job here
        blocks = max(1, math.ceil(len(rows) / self.backend.batch_size))
        results = ray.data.from_items(rows, override_num_blocks=blocks).map_batches(
            StructuredMap,
            fn_constructor_kwargs={
                "contract": self.contract,
                "client": self.backend.make_clients,
                "in_flight": self.backend.per_actor,
                "max_tokens": self.settings.max_tokens,
                "job": JobRows(self.settings, self.prompt),
            },
            batch_size=self.backend.batch_size,
            batch_format="pyarrow",
            compute=ActorPoolStrategy(size=self.backend.actors),
        )
        waiting = {row.seq for row in page}
        self.backend.in_flight = len(waiting)
        batches = _Batches(results.iter_batches(batch_format="pyarrow", batch_size=None))
        try:
            while True:
                # A bounded wait for the next batch, so that the input and the cancel flag are
                # looked at every tick, as the local runner does, even while the servers hold
                # every answer (and the lease is renewed meanwhile).
                rows_out = batches.next(self.tick_seconds)
                if rows_out is _END:
                    return False
                if rows_out is not None:
                    self.commit(_decisions(rows_out, waiting))
                    self.backend.in_flight = len(waiting)
                self.tick()
                if self.stop():
                    return True
        finally:
            batches.close()
            self.backend.in_flight = 0

    def _row(self, row: ItemRow) -> dict[str, Any]:
        return {
            "_seq": row.seq,
            "_id": row.id,
            "_id_number": row.id_number,
            "_line_in": self.line(row).decode(),
            "_requests": row.requests,
            "_resubmits_used": row.resubmits_used,
            "_input_tokens": row.input_tokens,
            "_output_tokens": row.output_tokens,
        }


_END: Any = object()
"""`_Batches.next`'s mark for the end of the output."""


class _Stopped(BaseException):
    """Raised in `_Batches`' thread to end Ray's iterator (and with it the dataset's run); a
    `BaseException`, as `GeneratorExit` is, so that Ray does not log it as its own failure."""


class _Batches:
    """A dataset's output batches (as rows), read in a thread of their own: Ray's iterator waits
    for as long as the actors take, and the driver must not (`next` waits at most `timeout`).

    `close` ends the dataset's run at once, as leaving a `for` over the iterator does: a thread
    cannot close a generator another thread is running, so `_Stopped` is raised in the reader
    thread, where Ray's iterator waits in a Python loop (polling every 10 ms); it leaves the
    iterator through its `finally`, which shuts the dataset's executor down. Without that, the
    actors went on calling the servers for a job that had stopped."""

    def __init__(self, batches: Iterable[Any]) -> None:
        self._queue: queue.Queue[tuple[str, Any]] = queue.Queue(maxsize=2)
        self._closed = threading.Event()
        self._reading = _fork.lock()
        """Held while the thread is inside Ray's iterator: `_Stopped` is raised there alone."""
        self._thread = threading.Thread(
            target=self._read, args=(iter(batches),), name="sdk-ray-batches", daemon=True
        )
        self._thread.start()

    def _read(self, batches: Iterator[Any]) -> None:
        try:
            while not self._closed.is_set():
                try:
                    with self._reading:
                        table = next(batches)
                except StopIteration:
                    self._put(("end", None))
                    return
                if not self._put(("rows", table.to_pylist())):
                    return
        except _Stopped:
            pass
        except BaseException as error:  # the driver raises it
            self._put(("error", error))
        finally:
            close = getattr(batches, "close", None)
            if close is not None:
                with contextlib.suppress(Exception, _Stopped):
                    close()

    def _put(self, item: tuple[str, Any]) -> bool:
        while not self._closed.is_set():
            with contextlib.suppress(queue.Full):
                self._queue.put(item, timeout=0.1)
                return True
        return False

    def next(self, timeout: float) -> list[dict[str, Any]] | None:
        """The next batch's rows, `_END` after the last, `None` if none came within `timeout`
        seconds; what the iterator raised is raised here."""
        try:
            kind, value = self._queue.get(timeout=timeout)
        except queue.Empty:
            return None
        if kind == "error":
            raise value
        rows: list[dict[str, Any]] | None = _END if kind == "end" else value
        return rows

    def close(self, wait: float = 10.0) -> None:
        """Stop reading and end the dataset's run (waiting at most `wait` seconds for it).

        `_Stopped` is raised once: the iterator's `finally` runs while the thread still reads
        (Ray's executor shutdown joins its scheduling thread, up to 2 s, before it shuts the
        actors down), and a second one would land there and cut that shutdown short."""
        self._closed.set()
        deadline = time.monotonic() + wait
        while self._thread.is_alive() and time.monotonic() < deadline:
            if self._reading.locked() and self._thread.ident is not None:
                ctypes.pythonapi.PyThreadState_SetAsyncExc(
                    ctypes.c_ulong(self._thread.ident), ctypes.py_object(_Stopped)
                )
                break
            self._thread.join(0.05)
        self._thread.join(max(0.0, deadline - time.monotonic()))


def _decisions(rows: list[dict[str, Any]], waiting: set[int]) -> list[Decision]:
    """The decisions of an output batch for the items still waiting in this page (each once:
    a batch Ray ran twice is committed once); a row with no decision (its batch timed out)
    stays pending for the next pass."""
    decisions: list[Decision] = []
    for row in rows:
        seq, update = row["_seq"], row["_update"]
        if seq not in waiting or update is None:
            continue
        waiting.discard(seq)
        item = ItemUpdate(**json.loads(update))
        line = row["_line"].encode() if row["_line"] is not None else None
        decisions.append(Decision(item, line, item.outcome if item.state == "done" else None))
    return decisions
