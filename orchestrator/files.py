"""Writing a run root's files: whole, with one mode, never through a link, and failing in one line.

Every file is written to a hidden temporary name beside its target, flushed to disk and renamed over it, so a
reader, or the next driver after a crash, finds the old file or the new one and never a part of one. Every file
a sweep writes may hold its configuration (the resolved config, repro commands, the command line), so each is
``FILE_MODE`` and each folder ``DIR_MODE``, whatever the umask: the owner and the owner's group read them, nobody
else. A write the storage refuses (disk full, a read-only mount, a file where a folder belongs) is a
``StorageError`` naming the path and the cause.

Inside the run root a driver holds (``holding``, entered by ``lock.hold``), nothing is followed through a symbolic
link: a planted ``results`` link would send the rows elsewhere, a planted ``.lock`` link would have the driver
truncate its target. Every folder and file made there is first checked by ``refuse_links``, and a run root moved
or deleted under the driver, or a top folder of it (``results/``, ``sweeps/``) deleted or replaced, stops the
writes with one line instead of a second run root growing at the old path.
"""

from __future__ import annotations

import errno
import os
import shutil
import stat
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

FILE_MODE = 0o640  # rw-r-----: configuration may hold a host name or a token; not for every user of the machine
DIR_MODE = 0o750  # rwxr-x---: the same for the folders that name them
# while a driver holds a run root, what the process makes without saying a mode (MLflow's artifact folders,
# SQLite's journals) is at most DIR_MODE / FILE_MODE too
HOLDING_UMASK = 0o027


class StorageError(OSError):
    """The run root's storage refused a write or a folder; the message names the path and why."""


def storage_error(path: Path, exc: OSError, doing: str = "write") -> StorageError:
    """``exc`` as one line: ``cannot write <path>: No space left on device``."""
    reason = exc.strerror or str(exc) or type(exc).__name__
    if exc.errno == errno.ENOTDIR or isinstance(exc, FileExistsError | NotADirectoryError):
        reason += " (a file stands where a folder belongs)"
    if exc.errno == errno.ELOOP:
        reason = "it is a symbolic link, which a run root never follows (remove it)"
    return StorageError(f"cannot {doing} {path}: {reason}")


@dataclass
class _Held:
    """A run root this process holds: the folder it locked and the top folders it has seen there."""

    identity: tuple[int, int]  # (st_dev, st_ino) of the locked folder
    top_folders: dict[str, tuple[int, int]] = field(default_factory=dict)


_HELD: dict[Path, _Held] = {}


def _identity(result: os.stat_result) -> tuple[int, int]:
    return result.st_dev, result.st_ino


@contextmanager
def holding(root: Path, folder_fd: int) -> Iterator[None]:
    """Mark ``root`` (the folder open as ``folder_fd``, locked by the caller) as this process's run root for the
    block: every write under it is checked (``check_path``), and the umask is ``HOLDING_UMASK`` at least."""
    key = Path(os.path.abspath(root))
    _HELD[key] = _Held(_identity(os.fstat(folder_fd)))
    umask = os.umask(HOLDING_UMASK)
    os.umask(umask | HOLDING_UMASK)
    try:
        yield
    finally:
        os.umask(umask)
        _HELD.pop(key, None)


def refuse_links(root: Path, path: Path) -> None:
    """A ``StorageError`` if any part of ``path`` below ``root`` that exists is a symbolic link (``root`` itself
    may be one: the user named it)."""
    root, path = Path(os.path.abspath(root)), Path(os.path.abspath(path))
    current = root
    for part in path.relative_to(root).parts:
        current = current / part
        try:
            mode = os.lstat(current).st_mode
        except FileNotFoundError:
            return
        except OSError as exc:
            raise storage_error(current, exc, "check") from None
        if stat.S_ISLNK(mode):
            raise StorageError(f"cannot write {path}: {current} is a symbolic link, which a run root never follows "
                               "(remove it)")


def check_path(path: Path) -> None:
    """Before ``path`` is made or written: if it is inside a run root this process holds, that root is still the
    folder it locked, its top folder on the way is still the one first seen, and no link is on the way."""
    path = Path(os.path.abspath(path))
    for root, held in _HELD.items():
        if path != root and root not in path.parents:
            continue
        try:
            here = _identity(os.stat(root))
        except OSError:
            here = None
        if here != held.identity:
            raise StorageError(f"cannot write {path}: the run root {root} was moved or deleted while this driver "
                               "held it; nothing more is written (put it back, then resume)")
        refuse_links(root, path)
        if path == root:
            continue
        top = root / path.relative_to(root).parts[0]
        try:
            seen = _identity(os.lstat(top)) if stat.S_ISDIR(os.lstat(top).st_mode) else None
        except FileNotFoundError:
            seen = None
        first = held.top_folders.get(top.name)
        if first is not None and seen != first:
            raise StorageError(f"cannot write {path}: {top} was deleted or replaced while this driver held the run "
                               "root; nothing more is written there (resume to run what it lost again)")
        if seen is not None:
            held.top_folders[top.name] = seen


def make_dir(path: Path) -> Path:
    """``path`` and its missing parents as folders of ``DIR_MODE`` (whatever the umask; inside a held run root,
    checked by ``check_path``), or a ``StorageError``."""
    path = Path(path)
    check_path(path)
    missing = []
    for folder in (path, *path.parents):
        if os.path.lexists(folder):
            break
        missing.append(folder)
    for folder in reversed(missing):
        try:
            os.mkdir(folder, DIR_MODE)
            os.chmod(folder, DIR_MODE)  # mkdir's mode is cut by the umask
        except FileExistsError:
            pass  # made meanwhile by another writer
        except OSError as exc:
            raise storage_error(folder, exc, "make the folder") from None
    if not path.is_dir():
        raise StorageError(f"cannot make the folder {path}: a file of that name is in the way")
    if missing:
        check_path(path)  # the top folder just made is the one later writes must find
    return path


def write_whole(path: Path, content: str | bytes | Callable[[Path], None], mode: int = FILE_MODE) -> Path:
    """Write ``content`` (text, bytes, or a function writing the file at the path it is given) to ``path``
    whole, as ``mode``; raises ``StorageError``. The temporary is made new (never an existing file or link), and the
    rename replaces a link at ``path`` rather than following it."""
    path = Path(path)
    make_dir(path.parent)
    tmp = path.with_name(f".{path.name}.{uuid.uuid4().hex[:8]}.tmp")
    try:
        descriptor = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, mode)
        with open(descriptor, "wb") as fh:
            if not callable(content):
                fh.write(content.encode() if isinstance(content, str) else content)
        if callable(content):
            content(tmp)
        os.chmod(tmp, mode)
        with open(tmp, "rb") as fh:
            os.fsync(fh.fileno())
        check_path(path)
        os.replace(tmp, path)
    except OSError as exc:
        tmp.unlink(missing_ok=True)
        if isinstance(exc, StorageError):
            raise
        try:  # a run root moved, or a top folder deleted, under the write: said as that, not "no such file"
            check_path(path)
        except StorageError as why:
            raise why from None
        raise storage_error(path, exc) from None
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    return path


def check_writable(folder: Path, subfolders: tuple[str, ...] = ()) -> None:
    """Before any work: ``folder`` is a folder (made if missing) that takes a file, and so is each of its
    ``subfolders`` that exists (one missing is made by the first write, in ``folder``), none of them a link;
    raises ``StorageError`` naming the first that is not."""
    make_dir(Path(folder))
    for path in (Path(folder), *(Path(folder) / name for name in subfolders)):
        refuse_links(Path(folder), path)
        if path.exists() and not path.is_dir():
            raise StorageError(f"cannot make the folder {path}: a file of that name is in the way")
        if not path.exists():
            continue
        probe = path / f".wavealign-write-probe-{os.getpid()}"
        try:
            probe.write_bytes(b"")
            probe.unlink()
        except OSError as exc:
            raise storage_error(path, exc, "write into") from None


def check_free(folder: Path, needed_bytes: int, what: str) -> None:
    """Before any work: the file system of ``folder`` has ``needed_bytes`` free for ``what`` (an estimate of what the
    work will write), else a ``StorageError`` naming both figures."""
    free = shutil.disk_usage(folder).free
    if free < needed_bytes:
        raise StorageError(f"cannot write {folder}: {free / 2**20:,.2f} MiB free, and {what} needs about "
                           f"{needed_bytes / 2**20:,.2f} MiB; free some space, or run fewer cells")
