"""Opening, replacing and walking files beneath the workspace root, checked on what is opened.

:meth:`~fanloop.tools._workspace.Workspace.resolve` checks a *path*. Between that check and an
``open``, another process (a command the model started, say) can swap a directory or the file
for a symbolic link that points out of the workspace. The helpers here close that gap:

- :func:`at` opens the checked path one component at a time from a descriptor of the root, each
  with ``O_NOFOLLOW | O_DIRECTORY`` relative to its parent's descriptor, so a component that
  became a symbolic link fails to open instead of being followed; the check and the open are
  then retried (a few times) from the start.
- The final component is opened, created, renamed and removed only relative to its parent's
  descriptor and never followed (:func:`open_regular`, :func:`replace`, ``os.unlink``).
  :func:`replace` writes a new temporary file and renames it over the target, so an existing
  file, a symbolic link swapped in at the last moment or a hard link is never written through.
- :func:`walk` lists directories through descriptors and never follows a symbolic link to a
  directory: a walk cannot leave the tree it started in, and a link loop is just an entry.
- :class:`Budget` stops a walk or search softly, a little before the caller's deadline, so the
  partial result still gets back in time; and at once when the caller stops waiting.

Reading a file once it is open, within bounds (:func:`read_capped`, :class:`LineReader`), is
in :mod:`fanloop.tools._fread`; both are re-exported here.

POSIX only (``O_NOFOLLOW``, ``dir_fd``).
"""

from __future__ import annotations

import contextlib
import errno
import heapq
import os
import secrets
import stat
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Literal, TypeVar

from .._record import record
from ..errors import ToolError
from ._blocking import Stop, Stopped
from ._fread import LineReader, read_capped

if TYPE_CHECKING:
    from _typeshed import SupportsRichComparison

    from ._workspace import Workspace

__all__ = [
    "Budget",
    "Entry",
    "LineReader",
    "NotRegularFile",
    "Place",
    "Raced",
    "at",
    "existing",
    "open_directory",
    "open_dirs",
    "open_regular",
    "read_capped",
    "replace",
    "sort_in_pieces",
    "walk",
]

T = TypeVar("T")
S = TypeVar("S", bound="SupportsRichComparison")

_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_READ_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
_TEMP_FLAGS = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
_ATTEMPTS = 3


class Raced(Exception):
    """A checked path changed while it was being opened (a component became a link)."""


class NotRegularFile(OSError):
    """The path is a pipe, socket or device (opening one could block or never end)."""


@record()
class Place:
    """A checked path, opened down to its parent directory.

    Attributes:
        path: the resolved path, inside the root.
        display: the path relative to the root, for messages.
        dir_fd: a descriptor of the parent directory (of the root itself when ``name`` is
            empty); valid only inside the function given to :func:`at`.
        name: the final component; ``""`` when the path is the root.
    """

    path: Path
    display: str
    dir_fd: int
    name: str


def at(
    workspace: Workspace,
    raw: str,
    fn: Callable[[Place], T],
    *,
    root: Path,
    fail: Callable[[OSError, str], Exception],
    create_parents: bool = False,
    follow_last: bool = True,
) -> T:
    """Check ``raw``, open its parent directory beneath ``root`` and return ``fn(place)``.

    Args:
        workspace: the workspace that checks the path.
        raw: the path the model gave.
        fn: the work to do with the opened place; it raises :class:`Raced` when the final
            component turns out to be a symbolic link, and the whole check is made again.
        root: the resolved workspace root.
        fail: turns an :class:`OSError` (and the path's display form) into the error to raise.
        create_parents: create missing parent directories (each beneath its checked parent).
        follow_last: resolve the final component too; ``False`` names a link itself.

    Raises:
        ToolError: the path is malformed, leaves the root, or kept changing while opened.
        Stopped: the caller stopped waiting, or its deadline passed.
    """
    for _ in range(_ATTEMPTS):
        if follow_last:
            path = workspace.resolve(raw, root=root)
            parts = path.relative_to(root).parts
            parents, name = parts[:-1], (parts[-1] if parts else "")
        else:
            parent, name = workspace.resolve_parent(raw, root=root)
            path = parent / name
            parents = parent.relative_to(root).parts
        display = workspace.display(path, root=root)
        try:
            dir_fd = open_dirs(root, parents, create=create_parents)
        except Raced:
            continue
        except Stopped:
            raise
        except OSError as exc:
            raise fail(exc, display) from None
        try:
            return fn(Place(path, display, dir_fd, name))
        except Raced:
            continue
        except Stopped:
            raise
        except OSError as exc:
            raise fail(exc, display) from None
        finally:
            os.close(dir_fd)
    raise ToolError(
        f"The path {raw!r} kept changing while it was being opened (a symbolic link was "
        "swapped in); nothing was done. Try again."
    )


def open_dirs(root: Path, parts: Sequence[str], *, create: bool = False) -> int:
    """A descriptor of ``root/parts...``, opened one directory at a time, links refused.

    Raises:
        Raced: a component is a symbolic link.
        OSError: a component is missing (and ``create`` is false) or is not a directory.
    """
    fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)  # the root is trusted
    try:
        for part in parts:
            nxt = _open_dir(fd, part, create)
            os.close(fd)
            fd = nxt
    except BaseException:
        os.close(fd)
        raise
    return fd


def _open_dir(dir_fd: int, name: str, create: bool) -> int:
    try:
        return os.open(name, _DIR_FLAGS, dir_fd=dir_fd)
    except FileNotFoundError:
        if not create:
            raise
    except OSError as exc:
        if exc.errno in (errno.ENOTDIR, errno.ELOOP) and _is_link(dir_fd, name):
            raise Raced from None
        raise
    with contextlib.suppress(FileExistsError):
        os.mkdir(name, 0o777, dir_fd=dir_fd)
    return _open_dir(dir_fd, name, False)


def _is_link(dir_fd: int, name: str) -> bool:
    try:
        return stat.S_ISLNK(os.stat(name, dir_fd=dir_fd, follow_symlinks=False).st_mode)
    except OSError:
        return False


def existing(place: Place) -> os.stat_result | None:
    """The status of the place's final component (not followed), ``None`` if it is missing.

    Raises:
        Raced: it is a symbolic link (it was not when the path was checked).
        IsADirectoryError: it is a directory.
        NotRegularFile: it is a pipe, socket or device.
    """
    if not place.name:
        raise IsADirectoryError(errno.EISDIR, "Is a directory")
    try:
        info = os.stat(place.name, dir_fd=place.dir_fd, follow_symlinks=False)
    except FileNotFoundError:
        return None
    _check_kind(info.st_mode)
    return info


def _check_kind(mode: int) -> None:
    if stat.S_ISLNK(mode):
        raise Raced
    if stat.S_ISDIR(mode):
        raise IsADirectoryError(errno.EISDIR, "Is a directory")
    if not stat.S_ISREG(mode):
        raise NotRegularFile(errno.EINVAL, "Not a regular file")


def open_regular(place: Place) -> tuple[int, os.stat_result]:
    """Open the place's regular file for reading; checks what was opened.

    Raises:
        FileNotFoundError: it is missing.
        Raced, IsADirectoryError, NotRegularFile: see :func:`existing`.
    """
    if existing(place) is None:
        raise FileNotFoundError(errno.ENOENT, "No such file or directory")
    try:
        fd = os.open(place.name, _READ_FLAGS, dir_fd=place.dir_fd)
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise Raced from None
        raise
    try:
        info = os.fstat(fd)
        _check_kind(info.st_mode)
    except BaseException:
        os.close(fd)
        raise
    return fd, info


def open_directory(place: Place) -> int:
    """Open the place's directory (the root itself when ``name`` is empty).

    Raises:
        Raced: it is a symbolic link.
        NotADirectoryError, FileNotFoundError: it is a file, or missing.
    """
    if not place.name:
        return os.dup(place.dir_fd)
    return _open_dir(place.dir_fd, place.name, False)


def replace(place: Place, data: bytes, *, like: os.stat_result | None) -> None:
    """Write ``data`` to a new file in the place's directory and rename it over the name.

    The target is never opened: an existing file keeps its old content until the rename, and a
    symbolic or hard link at the name is replaced, not written through.

    Args:
        place: where to write.
        data: the new content.
        like: the file being replaced, whose permission bits (and, when allowed, owner) the
            new file takes; ``None`` for a new file (the umask applies).
    """
    dir_fd = place.dir_fd
    for _ in range(_ATTEMPTS):
        temp = f".fanloop-{secrets.token_hex(8)}.tmp"
        try:
            fd = os.open(temp, _TEMP_FLAGS, 0o666, dir_fd=dir_fd)
            break
        except FileExistsError:
            continue
    else:
        raise FileExistsError(errno.EEXIST, "no free temporary name")
    try:
        with open(fd, "wb", closefd=True) as fh:
            if like is not None:
                os.fchmod(fd, stat.S_IMODE(like.st_mode))
                if (like.st_uid, like.st_gid) != (os.geteuid(), os.getegid()):
                    with contextlib.suppress(OSError):
                        os.fchown(fd, like.st_uid, like.st_gid)
            fh.write(data)
        os.rename(temp, place.name, src_dir_fd=dir_fd, dst_dir_fd=dir_fd)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(temp, dir_fd=dir_fd)
        raise


# -- walks ----------------------------------------------------------------------------------

Reason = Literal["time", "stopped"]
_MARGIN = 0.5  # the most a budget ends before the deadline (a third of what is left at most)


class Budget:
    """How long and how far a walk or a search may go.

    It ends softly: at ``seconds`` after it was made, and a little before the caller's deadline
    (``stop.deadline``), so a partial result still gets back in time; at once when the caller
    stops waiting. :attr:`reason` says why it ended; :attr:`capped` says a walk met more than
    ``entries`` entries (the entries already met are still worked on).

    Args:
        stop: the caller's stop signal and deadline.
        seconds: the most time the work may take.
        entries: the most directory entries a walk may visit.
    """

    def __init__(self, stop: Stop, *, seconds: float | None = None, entries: int | None = None):
        now = time.monotonic()
        self.stop = stop
        self.started = now
        ends = [] if seconds is None else [now + seconds]
        if stop.deadline is not None:
            left = max(0.0, stop.deadline - now)
            ends.append(stop.deadline - min(_MARGIN, left / 3))
        self.ends: float | None = min(ends) if ends else None
        self.entries = entries
        self.visited = 0
        self.capped = False
        self.reason: Reason | None = None

    @property
    def elapsed(self) -> float:
        """Seconds since the budget was made."""
        return time.monotonic() - self.started

    def spent(self) -> bool:
        """Whether the work must end now (and :attr:`reason` says why)."""
        if self.reason is None:
            if self.stop.stopped:
                self.reason = "stopped"
            elif self.ends is not None and time.monotonic() >= self.ends:
                self.reason = "time"
        return self.reason is not None

    def left(self, cap: float) -> float:
        """Seconds left (at most ``cap``); ``0`` when spent."""
        if self.spent():
            return 0.0
        if self.ends is None:
            return cap
        return max(0.0, min(cap, self.ends - time.monotonic()))

    def visit(self) -> bool:
        """Count one entry; ``False`` when the walk must end."""
        if self.capped or self.spent():
            return False
        self.visited += 1
        if self.entries is not None and self.visited > self.entries:
            self.capped = True
            return False
        return True


Kind = Literal["file", "dir", "link", "other"]


@record(frozen=True)
class Entry:
    """One entry met by :func:`walk`.

    Attributes:
        parts: its path relative to the directory the walk started in.
        kind: ``"file"`` (regular), ``"dir"``, ``"link"`` (symbolic, never followed) or
            ``"other"``.
        dir_fd: a descriptor of its directory; valid until the walk moves on.
    """

    parts: tuple[str, ...]
    kind: Kind
    dir_fd: int

    @property
    def name(self) -> str:
        """The entry's own name."""
        return self.parts[-1]


def walk(
    top_fd: int,
    budget: Budget,
    *,
    skip: frozenset[str] = frozenset(),
    descend: Callable[[tuple[str, ...]], bool] | None = None,
    max_depth: int = 64,
) -> Iterator[Entry]:
    """Every entry under the directory ``top_fd``, depth first.

    In each directory the files come before the sub-directories, each sorted by name. Symbolic
    links are reported, never followed. The walk ends early when ``budget`` is spent.

    Args:
        top_fd: the directory to walk (not closed).
        budget: checked at every entry.
        skip: directory names neither reported nor entered (such as ``.git``).
        descend: whether to enter a sub-directory (given its parts); default: always.
        max_depth: directories deeper than this are reported but not entered.
    """
    yield from _walk(top_fd, (), budget, skip, descend, max_depth)


def _walk(
    fd: int,
    parts: tuple[str, ...],
    budget: Budget,
    skip: frozenset[str],
    descend: Callable[[tuple[str, ...]], bool] | None,
    depth: int,
) -> Iterator[Entry]:
    files: list[tuple[str, Kind]] = []
    dirs: list[str] = []
    try:
        with os.scandir(fd) as it:
            for item in it:
                if not budget.visit():
                    break
                kind = _kind(item)
                if kind == "dir":
                    if item.name not in skip:
                        dirs.append(item.name)
                else:
                    files.append((item.name, kind))
    except OSError:
        return  # unreadable: nothing to report
    files = sort_in_pieces(files)
    dirs = sort_in_pieces(dirs)
    for name, kind in files:
        yield Entry((*parts, name), kind, fd)
    for name in dirs:
        if budget.capped or budget.spent():
            return
        sub_parts = (*parts, name)
        yield Entry(sub_parts, "dir", fd)
        if depth <= 0 or (descend is not None and not descend(sub_parts)):
            continue
        try:
            sub = os.open(name, _DIR_FLAGS, dir_fd=fd)  # a link swapped in fails here
        except OSError:
            continue
        try:
            yield from _walk(sub, sub_parts, budget, skip, descend, depth - 1)
        finally:
            os.close(sub)


_PIECE = 4096


def sort_in_pieces(items: list[S]) -> list[S]:
    """``sorted(items)``, without holding the interpreter lock long on a long list.

    ``list.sort`` runs in C from start to end: on 200,000 entries that is a third of a second
    in which no other thread (nor the event loop) runs. Pieces are sorted apart and merged in
    Python, which lets the other threads in between.
    """
    if len(items) <= _PIECE:
        return sorted(items)
    pieces = [sorted(items[i : i + _PIECE]) for i in range(0, len(items), _PIECE)]
    return list(heapq.merge(*pieces))


def _kind(item: os.DirEntry[str]) -> Kind:
    try:
        if item.is_symlink():
            return "link"
        if item.is_dir(follow_symlinks=False):
            return "dir"
        if item.is_file(follow_symlinks=False):
            return "file"
    except OSError:
        pass
    return "other"
