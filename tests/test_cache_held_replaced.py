from __future__ import annotations

import concurrent.futures
import os
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from sdk.cache import Entry
from sdk.cache import SQLiteCache
from sdk.cache import _held
from sdk.providers import TestProvider


def _entry(text: str) -> Entry:
    return Entry((TestProvider.refusal(text),))


def _text(entry: Entry | None) -> str | None:
    return entry.completions[0].text if entry is not None else None


def _in_a_thread(work) -> None:
    thread = threading.Thread(target=work)
    thread.start()
    thread.join(30)


def test_a_file_deleted_and_made_again_under_a_store_is_never_served_stale(
    tmp_path: Path,
) -> None:
    path = tmp_path / "c.db"
    store = SQLiteCache(path)
    store.put("k", _entry("one"))
    assert _text(store.get("k")) == "one"  # (this thread's connection: the first file)
    for suffix in ("", "-wal", "-shm"):
        os.unlink(f"{path}{suffix}")
    found: list[str | None] = []

    def other_thread() -> None:  # (a connection of its own: the new file)
        SQLiteCache(path).put("k", _entry("v1"))
        store.get("k")
        store.get("k")
        SQLiteCache(path).put("k", _entry("v2"))
        found.append(_text(store.get("k")))

    _in_a_thread(other_thread)
    assert found == ["v2"]


def test_a_store_s_own_write_to_its_deleted_file_is_seen(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The store's connection stays on the file it opened, deleted; a new file is made at the
    path by another connection: the store's own write (to the deleted file) is what it finds."""
    monkeypatch.setattr(_held, "_RETRY_SPACING", 0.0)
    path = tmp_path / "c.db"
    store = SQLiteCache(path)
    store.put("k", _entry("one"))
    store.get("k")
    for suffix in ("", "-wal", "-shm"):
        os.unlink(f"{path}{suffix}")
    _in_a_thread(lambda: SQLiteCache(path).put("x", _entry("new file")))
    assert _text(store.get("k")) == "one"
    store.get("k")
    store.put("k", _entry("two"))
    assert _text(store.get("k")) == "two"


def test_notices_taken_when_an_exception_stops_their_telling_drop_every_held_entry(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Ctrl-C lands just after the notices were read from the kernel, before they were told:
    the held entry must not outlive the write they told of."""
    store = SQLiteCache(tmp_path / "c.db")
    store.put("k", _entry("one"))
    store.get("k")
    assert store.get("k") is store.get("k")
    SQLiteCache(tmp_path / "c.db").put("k", _entry("two"))
    real = os.read

    def interrupted(fd: int, size: int) -> bytes:
        real(fd, size)
        raise KeyboardInterrupt

    monkeypatch.setattr(os, "read", interrupted)
    with pytest.raises(KeyboardInterrupt):
        store.get("k")
    monkeypatch.setattr(os, "read", real)
    assert _text(store.get("k")) == "two"


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="changes told by inotify")
@pytest.mark.parametrize("linked", ["the file", "its folder"])
def test_a_symbolic_link_re_pointed_under_a_store_never_serves_the_old_file_s_entry(
    tmp_path: Path, linked: str
) -> None:
    """The store's path is a link (to the file, or to its folder) re-pointed to another cache
    file while the store holds an entry of the first: a thread whose connection opens the new
    file finds what that file holds, its own write included (the entry held was served, and
    the write, to a file not watched, never dropped it)."""
    for name in ("a", "b"):
        (tmp_path / name).mkdir()
        SQLiteCache(tmp_path / name / "c.db").put("k", _entry(f"{name}'s"))
    path = tmp_path / "link" if linked == "its folder" else tmp_path / "link.db"
    target = "c.db" if linked == "the file" else ""

    def point(name: str) -> None:
        (tmp_path / "new").symlink_to(tmp_path / name / target)
        os.replace(tmp_path / "new", path)

    point("a")
    store = SQLiteCache(path / "c.db" if linked == "its folder" else path)
    assert _text(store.get("k")) == "a's"
    assert store.get("k") is store.get("k")  # (held)
    point("b")
    found: list[str | None] = []

    def other_thread() -> None:  # (a connection of its own: the file the link names now)
        found.append(_text(store.get("k")))
        store.put("k", _entry("written"))
        found.append(_text(store.get("k")))

    _in_a_thread(other_thread)
    assert found == ["b's", "written"]
    assert _text(store.get("k")) == "a's"  # (this thread's connection: still the first file)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="changes told by inotify")
def test_a_connection_opened_before_its_link_was_re_pointed_holds_nothing_for_others(
    tmp_path: Path,
) -> None:
    """This thread's connection opened the first file, then the link was re-pointed and another
    thread's connection opened the second, all before any lookup (nothing watched yet): what
    this thread reads from the first file is never held, so the other thread finds what the
    second holds, its own write too (this thread's read was held under the watch of the file
    the path names now, and served to every thread)."""
    for name in ("a", "b"):
        (tmp_path / name).mkdir()
        SQLiteCache(tmp_path / name / "c.db").put("k", _entry(f"{name}'s"))
    link = tmp_path / "link.db"
    link.symlink_to(tmp_path / "a" / "c.db")
    store = SQLiteCache(link)
    # (a pool of one thread: the other thread's connection stays open between its tasks)
    with concurrent.futures.ThreadPoolExecutor(max_workers=1) as other:
        store.stats()  # (this thread's connection: the first file)
        (tmp_path / "new").symlink_to(tmp_path / "b" / "c.db")
        os.replace(tmp_path / "new", link)
        other.submit(store.stats).result(timeout=30)  # (the other's: the second file)
        assert [_text(store.get("k")) for _ in range(2)] == ["a's", "a's"]
        assert other.submit(lambda: _text(store.get("k"))).result(timeout=30) == "b's"
        other.submit(store.put, "k", _entry("written")).result(timeout=30)
        assert other.submit(lambda: _text(store.get("k"))).result(timeout=30) == "written"


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="changes told by inotify")
def test_a_folder_on_the_way_replaced_under_a_store_never_serves_the_old_file_s_entry(
    tmp_path: Path,
) -> None:
    """The store's folder renamed away and another put in its place (no link on the way): a
    thread whose connection opens the file there now finds what it holds, its own write too;
    this thread, whose connection stays on the first file, still reads that one."""
    for name in ("dir", "other"):
        (tmp_path / name).mkdir()
        SQLiteCache(tmp_path / name / "c.db").put("k", _entry(f"{name}'s"))
    store = SQLiteCache(tmp_path / "dir" / "c.db")
    assert [_text(store.get("k")) for _ in range(2)] == ["dir's", "dir's"]
    os.rename(tmp_path / "dir", tmp_path / "dir.old")
    os.rename(tmp_path / "other", tmp_path / "dir")
    found: list[str | None] = []

    def other_thread() -> None:
        found.append(_text(store.get("k")))
        store.put("k", _entry("written"))
        found.append(_text(store.get("k")))

    _in_a_thread(other_thread)
    assert found == ["other's", "written"]
    assert _text(store.get("k")) == "dir's"


_CLOSED_UNDER = """
import os, sys
from sdk import _changes
from sdk.cache import Entry, SQLiteCache
from sdk.providers import TestProvider

path, how = sys.argv[1], sys.argv[2]
store = SQLiteCache(path)
store.put("k", Entry((TestProvider.refusal("one"),)))
store.get("k")
assert store.get("k") is store.get("k")  # (held)
number = _changes._notices._fd
if how == "reused":  # (the number names a file opened since: here the cache file itself)
    os.dup2(os.open(path, os.O_RDONLY), number)
elif how == "a pipe":  # (another part's pipe, blocking, with bytes waiting: none taken)
    r, w = os.pipe()
    os.write(w, b"theirs")
    os.dup2(r, number)
else:
    os.close(number)
SQLiteCache(path).put("k", Entry((TestProvider.refusal("two"),)))
print(store.get("k").completions[0].text)
if how == "a pipe":
    os.set_blocking(number, False)
    assert os.read(number, 100) == b"theirs"
store.put("k", Entry((TestProvider.refusal("three"),)))
store.get("k")
print(store.get("k").completions[0].text, store.get("k") is store.get("k"))
"""


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="changes told by inotify")
@pytest.mark.parametrize("number", ["closed", "reused", "a pipe"])
def test_the_notices_descriptor_closed_by_other_code_neither_hangs_nor_fails_a_lookup(
    tmp_path: Path, number: str
) -> None:
    """Other code of the process closes the descriptor the kernel tells changes through (a
    loop closing every descriptor, a double close), its number left closed or given to a file
    opened since, or to a pipe with bytes waiting: a lookup read that file to its end for ever
    or took the pipe's bytes and blocked on it (a hang), or failed with a raw `OSError`. Now
    the notices are known lost, nothing of another's read: the next lookup finds what another
    store wrote, and entries are held again through a new descriptor."""
    done = subprocess.run(
        [sys.executable, "-c", _CLOSED_UNDER, str(tmp_path / "c.db"), number],
        capture_output=True, text=True, timeout=30,
        env={**os.environ, "PYTHONPATH": str(Path(__file__).parents[1])},
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.split() == ["two", "three", "True"]
    assert "closed by other code" in done.stderr
