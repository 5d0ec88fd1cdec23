"""One discipline for every SQLite file the SDK shares between threads and processes (the
response cache, a batch job's state), written once.

- **Made whole before it appears.** A new file is built in a temporary file beside it (owner-only,
  in WAL mode, with its tables and its identity) and linked into place: of several threads and
  processes making it at once, one wins and the others open the winner's (`make_whole`).
- **Identified inside one transaction.** The application id in the header, the format
  (`user_version`) and the tables are read in one read transaction, so a file another process is
  adopting is seen before or after, never halfway. A file that is not one of ours (another
  application's database) is refused and never changed.
- **An empty file is adopted in place** (0 bytes: made by `touch`, or left by an older
  version), inside one write transaction, and made owner-only. Any other file without our
  identity (one byte of a newline, a note, another application's database) is refused and
  left as it is.
- **Readers never wait.** WAL mode: a read in autocommit sees the last commit and takes no lock
  a writer waits for, nor waits for one.
- **Every wait is bounded.** The busy timeout (`timeout`, seconds) bounds every wait for another
  connection's write; past it, as for any other SQLite error (a damaged page, a full disk), the
  caller gets its own typed error naming the file and saying which it is (`errors`), never a raw
  `sqlite3` error: a full disk or an I/O error is never called damage.
- **No fork while inside.** Every call into SQLite here is inside the calling thread's fork
  gate (`sdk._fork.gate`): a child is never forked while SQLite's own locks may be held.
- **Read-only opening** (`readonly=True`, for commands that only look): `mode=ro`, so nothing in
  the file can change. A WAL file whose folder cannot be written (another user's, a mounted
  archive, a read-only file system) cannot get its shared-memory index made, so it is read as
  `immutable`: exact when no write-ahead log is left beside it (a clean close leaves none), and
  refused when one is. SQLite takes `immutable` as a promise that the file never changes (no
  lock, no check, its pages kept), which the file's owner may break at any time, so such a
  connection is believed only while the file is provably as it was when it was opened
  (`stale`: the file's device, inode, size, times, and the log beside it, none changed, and
  none changed just before the opening): a reader (`SQLiteCache`) opens it again when it is
  not, or when a read through it finds the file changed or damaged (`changed_under`).
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import re
import socket
import sqlite3
import stat
import tempfile
import time
from collections.abc import Callable
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from sdk import _fork
from sdk._files import NOT_PERMITTED
from sdk._files import adopt_empty
from sdk._files import private_folder
from sdk._files import process_alive
from sdk._files import sync_folder

__all__ = [
    "DEFAULT_TIMEOUT",
    "Layout",
    "cannot_open_here",
    "cannot_write",
    "changed_under",
    "errors",
    "immutable",
    "make_whole",
    "open_file",
    "stale",
    "try_write",
    "typed",
    "write",
]

DEFAULT_TIMEOUT = 30.0
"""Seconds a connection waits for another's write before its typed error."""

# What SQLite says when a read-only connection cannot make the WAL index beside the file.
_NO_WAL_INDEX = frozenset(
    {"SQLITE_READONLY_DIRECTORY", "SQLITE_CANTOPEN", "SQLITE_READONLY_CANTINIT"}
)
_BUSY = frozenset({"SQLITE_BUSY", "SQLITE_LOCKED"})
# What a read-only connection (one that cannot write the WAL index) says while the process
# writing the file sets the index up (its start, a recovery): it goes by itself.
_INDEX_NOT_READY = frozenset({"SQLITE_READONLY_RECOVERY", "SQLITE_READONLY_CANTINIT"})
_INDEX_RETRY = 0.005
"""Seconds between tries of a read-only opening or read while the index is being set up."""
# What a read through an immutable connection says when the file changed under it (pages of
# two states of the file, or a file cut short): read again before it is believed.
_CHANGED_UNDER = frozenset({"SQLITE_NOTADB", "SQLITE_IOERR_SHORT_READ"})
_SETTLED_NS = 2_000_000_000
"""A file changed less than this long ago (nanoseconds) may change again with the same times:
file systems keep times in ticks (a few milliseconds; a second or two on some), so an immutable
connection opened then is never believed (`stale`)."""


@dataclass(frozen=True, slots=True)
class Layout:
    """What makes a file one of the SDK's: the application id in its header, its format
    (`user_version`), the tables it is made with, and the typed error that names a file that
    is not one (or is damaged, or stays busy)."""

    name: str
    """What the file is, for messages ("structured-sdk cache", "job state file")."""
    application_id: int
    version: int
    schema: tuple[str, ...]
    error: Callable[[str], Exception]
    identify: Callable[[sqlite3.Connection, Path], str | None] | None = None
    """Further checks of a file that has tables (its columns, a format row): `None` if it is
    ours, else why not. A file without our application id but with tables that pass is ours
    too (made before the id was written)."""
    adopt_empty: bool = True
    """Whether an empty file (or a missing one) is made into one of ours when opened for
    writing; if not, it is refused."""
    synchronous: str = "NORMAL"
    """NORMAL: in WAL mode each transaction still commits whole, only the last commits may go on
    a power cut; FULL: a commit survives a power cut too."""
    reading: str = "open it with readonly=True to only read it"
    """How to read a file of this layout that this process cannot write, for its messages
    (`{path}`: the file): the API that opens it so."""


def open_file(
    path: str | os.PathLike[str],
    layout: Layout,
    *,
    readonly: bool = False,
    timeout: float = DEFAULT_TIMEOUT,
    closed_anywhere: bool = False,
    make: bool = True,
) -> sqlite3.Connection:
    """A connection to `path` (autocommit: transactions are opened explicitly with `write`),
    identified as `layout`'s; made first if missing (an empty file adopted) if
    `layout.adopt_empty` and `make`, else refused. Any failure is `layout.error` naming the
    file. `closed_anywhere`: the connection may be closed from another thread than the one
    that uses it (an owner of one connection per thread closing them all)."""
    path = Path(path)
    with _fork.gate(), errors(path, layout, timeout):
        if readonly:
            return _open_readonly(path, layout, timeout, closed_anywhere)
        if layout.adopt_empty and make and not path.exists():
            with contextlib.suppress(FileExistsError):
                make_whole(_made_at(path), layout)
        elif not path.exists() or (not layout.adopt_empty and not path.is_file()):
            raise layout.error(f"{path}: no such file")
        # Opened as it is, never made (`mode=rw`): a file removed since the look above is an
        # error, not a new file SQLite would make with the process's umask, outside
        # `make_whole` (neither owner-only nor identified).
        _siblings_owned(path, layout)
        db = _connect(
            f"{path.absolute().as_uri()}?mode=rw", timeout, uri=True,
            closed_anywhere=closed_anywhere,
        )  # fmt: skip
        try:
            if _identify(db, layout, path) == "empty":
                _adopt(db, layout, path, timeout)
            db.execute(f"PRAGMA synchronous = {layout.synchronous}")
            _siblings_owned(path, layout)  # (SQLite has opened its log and index by now)
        except BaseException:
            db.close()
            raise
        return db


def _made_at(path: Path) -> Path:
    """Where a file opened at `path` is made: a link's target where the link, one of this
    user's, names one not there yet (the file is opened through the link), else `path`. A link
    of another user's is not followed here (in a shared folder the kernel refuses to follow
    it, `fs.protected_symlinks`: the opening then fails, typed)."""
    try:
        if not path.is_symlink() or path.lstat().st_uid != os.geteuid():
            return path
    except OSError:
        return path
    try:
        return path.resolve()
    except (OSError, RuntimeError):  # (a loop of links: made nowhere, and the opening fails)
        return path


def make_whole(
    path: str | os.PathLike[str],
    layout: Layout,
    fill: Callable[[sqlite3.Connection], None] | None = None,
) -> None:
    """Make a new file of `layout` at `path` (with `fill` run in the same transaction), whole
    before it appears: `FileExistsError` if something is there already (another process may
    have won the race), and nothing left behind on any failure."""
    path = Path(path)
    try:
        _make_whole(path, layout, fill)
    except FileExistsError:
        raise
    except sqlite3.Error as error:  # (on the temporary file, named by the file it was to be)
        raise typed(error, path, layout, DEFAULT_TIMEOUT, making=True) from error
    except OSError as error:  # no room for the temporary file, a folder that cannot be written
        why = unwritable_because(path) if error.errno in NOT_PERMITTED else None
        if why is not None:  # (the cause, named: "Permission denied" alone does not say whose)
            raise layout.error(f"{path} cannot be made ({error.strerror}): {why}") from error
        raise layout.error(f"{path} cannot be made: {error.strerror or error}") from error


def _make_whole(
    path: Path, layout: Layout, fill: Callable[[sqlite3.Connection], None] | None
) -> None:
    private_folder(path.parent)
    if path.exists():
        raise FileExistsError(path)
    maker = _maker_prefix(path)
    _sweep_left(path, maker)
    fd, temporary = tempfile.mkstemp(
        prefix=f"{maker}{os.getpid()}.", suffix=".tmp", dir=path.parent
    )
    os.close(fd)  # mkstemp's file is the owner's only (0600), and so are the WAL's beside it
    try:
        with _fork.gate():
            db = _connect(temporary, DEFAULT_TIMEOUT)
            try:
                db.execute("PRAGMA journal_mode = WAL")
                with write(db):
                    _initialize(db, layout)
                    if fill is not None:
                        fill(db)
            finally:
                db.close()
        _link(Path(temporary), path)
    finally:
        for suffix in ("", "-wal", "-shm", "-journal"):
            with contextlib.suppress(OSError):
                os.unlink(temporary + suffix)
    sync_folder(path.parent)


_PID = re.compile(r"[1-9][0-9]{0,8}")


def _maker_prefix(path: Path) -> str:
    """The start of the name of a temporary file `_make_whole` makes for `path` on this host;
    the maker's pid and a random part follow (`.job.db.HOST.PID.RANDOM.tmp`), so that a maker
    of this host killed before it linked its file is told apart from one still making it."""
    hostname = socket.gethostname()
    # (readable, and exact: hosts whose names differ only in what the file name cannot hold,
    # `a.b` and `a-b`, must not take each other's makers for their own)
    shown = re.sub(r"[^A-Za-z0-9-]", "-", hostname)[:32]
    exact = hashlib.sha256(hostname.encode("utf-8", "surrogatepass")).hexdigest()[:8]
    return f".{path.name}.{shown}-{exact}."


def _sweep_left(path: Path, maker: str) -> None:
    """Remove what makers of `path` killed before they linked it left beside it (their
    temporary file, and SQLite's files beside that): each one of this user's, named by this
    host (`_maker_prefix`) and a process that is gone (as a batch job's lease is told gone).
    A maker on another host (a shared file system), one alive, and a file of another user or
    another kind are left alone; so is everything on a system without POSIX signals."""
    if os.name != "posix":
        return
    try:
        names = [name for name in os.listdir(path.parent) if name.startswith(maker)]
    except OSError:
        return
    for name in names:
        base = next((name[: -len(s)] for s in _SIBLINGS if name.endswith(s)), name)
        pid, _, rest = base[len(maker) :].partition(".")
        # (a pid as `_make_whole` writes it: ASCII digits, below 2**31; any other name, such
        # as `²` or twenty digits, which `int` or `os.kill` would refuse, is not a maker's)
        if not (_PID.fullmatch(pid) and rest.endswith(".tmp")) or int(pid) == os.getpid():
            continue
        left = path.parent / name
        with contextlib.suppress(OSError):
            found = os.lstat(left)
            ours = stat.S_ISREG(found.st_mode) and found.st_uid == os.geteuid()
            if ours and not process_alive(int(pid)):
                os.unlink(left)


@contextmanager
def write(db: sqlite3.Connection) -> Iterator[sqlite3.Connection]:
    """One write transaction (`BEGIN IMMEDIATE`, waiting at most the busy timeout for another
    writer): all of it commits, or none of it. The block is inside the fork gate."""
    with _fork.gate():
        db.execute("BEGIN IMMEDIATE")
        try:
            yield db
        except BaseException:
            if db.in_transaction:
                db.execute("ROLLBACK")
            raise
        db.execute("COMMIT")


def try_write(db: sqlite3.Connection, wait: float = 0.0) -> bool:
    """Begin a write transaction only if no other connection is writing, or stops within
    `wait` seconds (default: no wait): for work that can be done later or dropped, such as
    writing counters."""
    with _fork.gate():
        timeout = db.execute("PRAGMA busy_timeout").fetchone()[0]
        db.execute(f"PRAGMA busy_timeout = {int(wait * 1000)}")
        try:
            db.execute("BEGIN IMMEDIATE")
        except sqlite3.OperationalError as error:
            if _code(error) in _BUSY:
                return False
            raise
        finally:
            db.execute(f"PRAGMA busy_timeout = {int(timeout)}")
        return True


@contextmanager
def errors(path: Path, layout: Layout, timeout: float = DEFAULT_TIMEOUT) -> Iterator[None]:
    """SQLite's errors on the file as `layout.error`, one line naming it: a file kept busy past
    the timeout, a damaged page, a file that is not a database."""
    try:
        yield
    except sqlite3.Error as error:
        raise typed(error, path, layout, timeout) from error


def cannot_write(error: BaseException) -> bool:
    """Whether `error` (a typed one, from `errors`) says the file cannot be written by this
    process: another user's file, or one in a folder of theirs."""
    cause = error.__cause__
    return isinstance(cause, sqlite3.Error) and _code(cause).startswith("SQLITE_READONLY")


def cannot_open_here(error: BaseException, path: str | os.PathLike[str]) -> bool:
    """Whether `error` (a typed one, from `errors`) is SQLite's "unable to open database file"
    for the file at `path` in a folder this process cannot write (a read-only file system, or
    a folder of another user's): what opening it for writing gives where its write-ahead log
    cannot be made, and a read-only opening may still read it."""
    cause = error.__cause__
    return (
        isinstance(cause, sqlite3.Error)
        and _code(cause) == "SQLITE_CANTOPEN"
        and not _folder_writable(Path(path))
    )


def changed_under(error: BaseException) -> bool:
    """Whether `error` (a typed one, from `errors`, from a read through an `immutable`
    connection) may come of the file changing under the connection rather than of damage:
    read again, through a new connection, before it is believed."""
    cause = error.__cause__
    if not isinstance(cause, sqlite3.Error):
        return False
    code = _code(cause)
    return code.startswith("SQLITE_CORRUPT") or code in _CHANGED_UNDER


def no_room(error: BaseException) -> bool:
    """Whether `error` (a typed one, from `errors`) says the file could not be written now for
    want of room: a full disk, a file size limit, a write the system refused."""
    cause = error.__cause__
    if not isinstance(cause, sqlite3.Error):
        return False
    code = _code(cause)
    return code == "SQLITE_FULL" or code.startswith("SQLITE_IOERR_WRITE")


def typed(
    error: sqlite3.Error, path: Path, layout: Layout, timeout: float, *, making: bool = False
) -> Exception:
    """The typed error for an SQLite error on the file (what `errors` raises); `making`: the
    error came while making the file (`make_whole`). A full disk and an I/O error say so, not
    that the file is damaged (an operator told that may delete a good file)."""
    code = _code(error)
    if code == "SQLITE_FULL":
        what = "cannot be made" if making else "cannot be written"
        return layout.error(f"{path} {what}: the disk is full ({error})")
    if code.startswith("SQLITE_IOERR"):
        what = "cannot be made" if making else "could not be read or written"
        return layout.error(f"{path} {what}: an I/O error from the system ({code}: {error})")
    if code in _BUSY:
        return layout.error(
            f"{path} stayed busy: another connection kept it locked for {timeout:g} s ({error})"
        )
    if code in _INDEX_NOT_READY:  # (a read-only opening, waiting past its timeout)
        return layout.error(
            f"{path} could not be read: the process writing it kept its write-ahead log's "
            f"index unready for {timeout:g} s ({code}: {error})"
        )
    reading = layout.reading.format(path=str(path))
    if code.startswith("SQLITE_READONLY"):  # another user's file, or in a folder of theirs
        why = unwritable_because(path)
        shown = f"{why}; " if why is not None else ""
        return layout.error(f"{path} cannot be written by this process ({error}): {shown}{reading}")
    if code == "SQLITE_CANTOPEN":  # the file, or its write-ahead log or index beside it
        what = "cannot be made" if making else "cannot be opened"
        if not _folder_writable(path):
            why = (
                f"its folder {path.parent} cannot be written by this process (a read-only file "
                "system, or another user's folder), so the files SQLite keeps beside it cannot be "
                f"made: {reading}"
            )
        else:
            why = (
                "the usual causes are too many open files in this process (its limit, "
                "`ulimit -n`), or a read-only file system or folder"
            )
        return layout.error(f"{path} {what} ({error}): {why}")
    return layout.error(f"{path} is damaged or not a {layout.name} ({error})")


def unwritable_because(path: Path) -> str | None:
    """Why this process cannot write the file at `path` (its folder, or the file itself), the
    one wording of every refusal that says so; `None` where it can (as far as `os.access`
    tells: no descriptor is opened)."""
    if not _folder_writable(path):
        return (
            f"the folder {path.parent} cannot be written by this process (a read-only file "
            "system, or another user's folder)"
        )
    if os.path.lexists(path) and not os.access(path, os.W_OK):
        return "the file cannot be written by this process (another user's, or read-only)"
    return None


def _folder_writable(path: Path) -> bool:
    """Whether this process may make files in `path`'s folder (`os.access`: the folder's mode,
    and a read-only file system; no descriptor is opened)."""
    return os.access(path.parent, os.W_OK)


# --- opening ---


def _connect(
    target: str,
    timeout: float,
    *,
    uri: bool = False,
    closed_anywhere: bool = False,
    factory: type[sqlite3.Connection] = sqlite3.Connection,
) -> sqlite3.Connection:
    with _fork.gate():
        db = sqlite3.connect(
            target,
            timeout=timeout,
            isolation_level=None,
            uri=uri,
            # Used by one thread always; `closed_anywhere`: closed by another one too.
            check_same_thread=not closed_anywhere,
            factory=factory,
        )
        db.execute(f"PRAGMA busy_timeout = {int(timeout * 1000)}")
        return db


def _identify(db: sqlite3.Connection, layout: Layout, path: Path) -> str:
    """ "ours" or "empty", read in one transaction; `layout.error` for anything else."""
    db.execute("BEGIN")
    try:
        found = _identity(db, layout, path)
    except BaseException:
        with contextlib.suppress(sqlite3.Error):
            db.execute("ROLLBACK")
        raise
    db.execute("COMMIT")
    return found


def _identity(db: sqlite3.Connection, layout: Layout, path: Path) -> str:
    """What `_identify` decides, inside the caller's transaction."""
    application = db.execute("PRAGMA application_id").fetchone()[0]
    version = db.execute("PRAGMA user_version").fetchone()[0]
    tables = db.execute("SELECT count(*) FROM sqlite_master").fetchone()[0]
    if application == 0 and not tables:
        if not _blank(path):  # (SQLite reads a file of one byte as an empty database)
            raise layout.error(f"{path} is not a {layout.name} (nor empty): left as it is")
        if layout.adopt_empty:
            return "empty"
        raise layout.error(f"{path} holds no {layout.name} (an empty database)")
    known = application == layout.application_id or (
        application == 0 and layout.identify is not None
    )
    if not known:
        raise layout.error(f"{path} is not a {layout.name}: left as it is")
    why = layout.identify(db, path) if layout.identify is not None else None
    if why is not None:
        raise layout.error(why)
    if application == layout.application_id and version != layout.version:
        raise layout.error(
            f"{path} is a {layout.name} of another version (format {version}, not "
            f"{layout.version}): left as it is"
        )
    return "ours"


def _blank(path: Path) -> bool:
    """Whether the file at `path` holds nothing (what may be adopted). Read inside the caller's
    transaction: while it lasts, no other connection can write the file's first page. One byte
    `S` is blank too: the byte SQLite itself writes into an empty file on a file system that
    misreports an empty file's identity (msdos), where it then reads it as empty.

    An empty file is told by its size alone: no descriptor of it is opened here, because
    closing one drops every POSIX lock this process holds on the file (POSIX's rule), the
    locks of SQLite's connections to it among them, and this runs inside a transaction while
    other threads may be adopting the file too (a commit then failed with "disk I/O error").
    Only a file of one byte is read, which no file system but msdos makes of an empty one."""
    try:
        size = os.stat(path).st_size
        if size != 1:
            return size == 0
        with open(path, "rb") as file:
            return file.read(2) == b"S"
    except OSError:
        return False


def _adopt(db: sqlite3.Connection, layout: Layout, path: Path, timeout: float) -> None:
    """Make an empty file ours in place: owner-only, our tables and identity in one
    transaction (another process adopting it at once waits, then finds it made), then WAL. An
    empty file of another user is refused (`sdk._files.adopt_empty`)."""
    refused = adopt_empty(path)
    if refused is not None:
        raise layout.error(f"{path} is {refused}")
    with write(db):
        if _identity(db, layout, path) == "empty":
            _initialize(db, layout)
    _into_wal(db, layout, path, timeout)


_WAL_RETRY = 0.005
"""Seconds between tries of the switch into WAL while other connections read the file."""


def _into_wal(db: sqlite3.Connection, layout: Layout, path: Path, timeout: float) -> None:
    """The adopted file into WAL: the switch needs the file to itself for a moment, and SQLite
    does not wait for that (no busy handler on that lock), so while other threads and processes
    adopting the same file read it, it is tried again, for at most `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            with _fork.gate():
                if db.execute("PRAGMA journal_mode = WAL").fetchone()[0] == "wal":
                    return
        except sqlite3.OperationalError as error:
            if _code(error) not in _BUSY or time.monotonic() >= deadline:
                raise
        if time.monotonic() >= deadline:  # (the switch refused without an error: never seen)
            raise layout.error(f"{path} could not be switched into WAL within {timeout:g} s")
        time.sleep(_WAL_RETRY)


def _initialize(db: sqlite3.Connection, layout: Layout) -> None:
    db.execute(f"PRAGMA application_id = {int(layout.application_id)}")
    db.execute(f"PRAGMA user_version = {int(layout.version)}")
    for statement in layout.schema:  # (executescript would commit midway)
        db.execute(statement)


class _ReadOnly(sqlite3.Connection):
    """A connection of a read-only opening (`_open_readonly`)."""


class _Immutable(_ReadOnly):
    """A connection opened `immutable=1` (`_open_readonly`), with what identified the file's
    content just before (`_stamp`; `None`: it had just changed, so nothing is proven)."""

    path: Path
    stamp: tuple[object, ...] | None


def read_only(db: sqlite3.Connection) -> bool:
    """Whether `db` is of a read-only opening (`open_file(readonly=True)`)."""
    return isinstance(db, _ReadOnly)


def immutable(db: sqlite3.Connection) -> bool:
    """Whether `db` reads its file as `immutable` (see `_open_readonly`)."""
    return type(db) is _Immutable


def index_not_ready(error: BaseException) -> bool:
    """Whether `error` (a typed one, from `errors`, from a read through a read-only opening)
    says the write-ahead log's index was being set up by the process writing the file (its
    start, or a recovery) at that moment: SQLite does not wait for that (a connection that
    cannot write the index cannot help), so the read is tried again, within the timeout."""
    cause = error.__cause__
    return isinstance(cause, sqlite3.Error) and _code(cause) in _INDEX_NOT_READY


def stale(db: sqlite3.Connection) -> bool:
    """Whether `db` may no longer read its file as it is: an `immutable` connection whose file
    changed since it was opened (or had just changed then, or is gone); never a connection of
    another kind (SQLite keeps those exact itself), which costs one type check."""
    if type(db) is not _Immutable:
        return False
    return db.stamp is None or _stamp(db.path) != db.stamp


def _stamp(path: Path) -> tuple[object, ...] | None:
    """What identifies the content of the file at `path` and of the write-ahead log beside it
    (only `os.stat`: a descriptor of the file opened and closed here would drop this process's
    locks on it); `None` when the file is gone, cannot be looked at, or changed so recently
    that a change now might leave its times as they are (`_SETTLED_NS`)."""
    try:
        found = os.stat(path)
        try:
            log = os.stat(f"{path}-wal")
        except FileNotFoundError:
            beside: tuple[int, ...] | None = None
        else:
            beside = (log.st_ino, log.st_size, log.st_mtime_ns, log.st_ctime_ns)
    except OSError:
        return None
    if time.time_ns() - max(found.st_mtime_ns, found.st_ctime_ns) < _SETTLED_NS:
        return None
    return (
        found.st_dev, found.st_ino, found.st_size, found.st_mtime_ns, found.st_ctime_ns, beside
    )  # fmt: skip


def _open_readonly(
    path: Path, layout: Layout, timeout: float, closed_anywhere: bool = False
) -> sqlite3.Connection:
    """`mode=ro`; in a folder where the WAL index cannot be made, `immutable=1` when no
    write-ahead log is waiting beside the file (then nothing is missed), stamped with what
    identified the file just before (`stale` tells when it no longer reads the file)."""
    if not path.is_file():
        raise layout.error(f"{path}: no such file")
    uri = path.resolve().as_uri()
    deadline = time.monotonic() + timeout
    while True:
        _siblings_owned(path, layout)
        db = _connect(
            f"{uri}?mode=ro", timeout, uri=True, closed_anywhere=closed_anywhere,
            factory=_ReadOnly,
        )  # fmt: skip
        try:
            _identify_readonly(db, layout, path)
            _siblings_owned(path, layout)
            return db
        except sqlite3.OperationalError as error:
            db.close()
            code = _code(error)
            if code == "SQLITE_READONLY_RECOVERY" and time.monotonic() < deadline:
                time.sleep(_INDEX_RETRY)  # (the writer is setting its index up: it goes)
                continue
            if code not in _NO_WAL_INDEX:
                raise
            failure = error
            break
        except BaseException:
            db.close()
            raise
    if _waiting_log(path):
        raise layout.error(
            f"{path} has writes in {path.name}-wal not yet in the file, and its folder "
            "cannot be written: open it where it can, once, to fold them in"
        ) from failure
    stamp = _stamp(path)  # (before: a change from now on is seen)
    found = _connect(
        f"{uri}?mode=ro&immutable=1", timeout, uri=True, closed_anywhere=closed_anywhere,
        factory=_Immutable,
    )  # fmt: skip
    assert isinstance(found, _Immutable)
    found.path, found.stamp = path, stamp
    try:
        _identify_readonly(found, layout, path)
    except BaseException:
        found.close()
        raise
    return found


_SIBLINGS = ("-wal", "-shm", "-journal")
"""The files SQLite keeps beside a database: its write-ahead log and its index (WAL mode), and
a rollback journal (which SQLite plays back into the database when it finds one)."""


def _siblings_owned(path: Path, layout: Layout) -> None:
    """Refuse `path` where a file SQLite keeps beside it (`_SIBLINGS`) is not a plain file, may
    be read or written by more users than the database, or, beside a database its owner's only
    (as the SDK makes them), is another user's: one planted in a folder others may write (`/tmp`)
    would be used as it is, SQLite writing the database's content into it for its maker to read
    and change (or playing a journal of theirs back into it). Beside a database others may read
    (its owner made it so), a log or index of another user's is a reader's (SQLite makes them as
    whoever opens the file), as ever. Looked at before SQLite opens them (which, run as root,
    gives another user's to the database's owner, their mode kept) and again once it has: the
    files it uses are then the ones the names give (a sticky folder keeps another user from
    replacing them). Only a folder of your own keeps others out of the moment between."""
    real = Path(os.path.realpath(path))  # (SQLite names them after the file a link names)
    try:
        database = os.stat(real)
    except FileNotFoundError:  # (removed meanwhile: the opening says so, typed)
        return
    allowed = stat.S_IMODE(database.st_mode)
    for suffix in _SIBLINGS:
        sibling = real.with_name(real.name + suffix)
        try:
            found = os.lstat(sibling)
        except FileNotFoundError:
            continue
        if not stat.S_ISREG(found.st_mode):
            what = "not a plain file"
        elif stat.S_IMODE(found.st_mode) & ~allowed & 0o777:
            what = (
                f"open to more users ({stat.S_IMODE(found.st_mode):04o}) than {real.name} "
                f"({allowed:04o})"
            )
        elif found.st_uid != database.st_uid and not allowed & 0o077:
            what = f"another user's (uid {found.st_uid}; {real.name} is uid {database.st_uid}'s)"
        else:
            continue
        raise layout.error(
            f"{sibling} is {what}: SQLite would keep {real.name}'s content there, for whoever "
            "made it to read and change; remove it (and keep the file in a folder of your own)"
        )


def _identify_readonly(db: sqlite3.Connection, layout: Layout, path: Path) -> None:
    if _identify(db, layout, path) == "empty":
        raise layout.error(f"{path} holds no {layout.name} (an empty database)")


def _waiting_log(path: Path) -> bool:
    try:
        return os.path.getsize(f"{path}-wal") > 0
    except OSError:
        return False


def _code(error: sqlite3.Error) -> str:
    return getattr(error, "sqlite_errorname", "") or ""


def _link(temporary: Path, path: Path) -> None:
    """Put the finished file at `path` unless something is there already (`FileExistsError`):
    a hard link is atomic; a file system without them gets a rename after a check (a race
    there is only as wide as the two calls)."""
    try:
        os.link(temporary, path)
    except FileExistsError:
        raise
    except OSError:
        if path.exists():
            raise FileExistsError(path) from None
        os.rename(temporary, path)
