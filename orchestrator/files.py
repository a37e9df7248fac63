"""Writing a run root's files: whole, with one mode, and failing in one line.

Every file is written to a hidden temporary name beside its target, flushed to disk and renamed over it, so a
reader, or the next driver after a crash, finds the old file or the new one and never a part of one. Every file
a sweep writes may hold its configuration (the resolved config, repro commands, the command line), so each is
``FILE_MODE``: the owner and the owner's group read it, nobody else. A write the storage refuses (disk full, a
read-only mount, a file where a folder belongs) is a ``StorageError`` naming the path and the cause.
"""

from __future__ import annotations

import errno
import os
import uuid
from collections.abc import Callable
from pathlib import Path

FILE_MODE = 0o640  # rw-r-----: configuration may hold a host name or a token; not for every user of the machine


class StorageError(OSError):
    """The run root's storage refused a write or a folder; the message names the path and why."""


def storage_error(path: Path, exc: OSError, doing: str = "write") -> StorageError:
    """``exc`` as one line: ``cannot write <path>: No space left on device``."""
    reason = exc.strerror or str(exc) or type(exc).__name__
    if exc.errno == errno.ENOTDIR or isinstance(exc, FileExistsError | NotADirectoryError):
        reason += " (a file stands where a folder belongs)"
    return StorageError(f"cannot {doing} {path}: {reason}")


def make_dir(path: Path) -> Path:
    """``path`` and its parents as folders, or a ``StorageError``."""
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise storage_error(path, exc, "make the folder") from None
    if not path.is_dir():
        raise StorageError(f"cannot make the folder {path}: a file of that name is in the way")
    return path


def write_whole(path: Path, content: str | bytes | Callable[[Path], None], mode: int = FILE_MODE) -> Path:
    """Write ``content`` (text, bytes, or a function writing the file at the path it is given) to ``path``
    whole, as ``mode``; raises ``StorageError``."""
    path = Path(path)
    make_dir(path.parent)
    tmp = path.with_name(f".{path.name}.{uuid.uuid4().hex[:8]}.tmp")
    try:
        if callable(content):
            content(tmp)
        else:
            with open(tmp, "wb") as fh:
                fh.write(content.encode() if isinstance(content, str) else content)
        os.chmod(tmp, mode)
        with open(tmp, "rb") as fh:
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except OSError as exc:
        tmp.unlink(missing_ok=True)
        raise storage_error(path, exc) from None
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    return path


def check_writable(folder: Path, subfolders: tuple[str, ...] = ()) -> None:
    """Before any work: ``folder`` is a folder (made if missing) that takes a file, and so is each of its
    ``subfolders`` that exists (one missing is made by the first write, in ``folder``); raises ``StorageError``
    naming the first that is not."""
    make_dir(Path(folder))
    for path in (Path(folder), *(Path(folder) / name for name in subfolders)):
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
