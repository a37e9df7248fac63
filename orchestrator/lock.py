"""One driver per run root: ``sweep`` and ``sync-mlflow`` hold an exclusive lock on the run root folder itself.

Two drivers on one run root would run every cell twice and race on the MLflow store's schema. The lock is
``fcntl.flock`` on an open descriptor of the run root folder: the kernel drops it when the holder exits, however it
exits, so a crashed driver never leaves a stale lock behind; and no file can be deleted or replaced to get past it
(a lock on a ``.lock`` file was: deleting the file under a running driver let a second one lock a new file of the
same name and run the same cells). ``.lock`` names the holder (host, PID, command, start time), so the refusal can
say who it is; it is written without following a link, and a missing or foreign one only makes the refusal less
specific. It is locked too, so that a driver of an earlier version (which locks only the file) and this one refuse
each other. While it holds the folder, the driver writes under it through ``files.holding``'s checks.
"""

from __future__ import annotations

import fcntl
import json
import os
import socket
import stat
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from orchestrator import files
from orchestrator.redact import redact
from orchestrator.run_root import RunRoot

_MAX_HOLDER_BYTES = 64 * 1024  # what a refusal reads of ``.lock``: a holder note is a few hundred bytes


class RunRootBusy(RuntimeError):
    """Another driver holds the run root; the message names it."""


@contextmanager
def hold(run_root: str | Path, what: str) -> Iterator[Path]:
    """Hold the run root ``run_root`` for the block (its ``.lock`` naming this driver as ``what``), or raise
    ``RunRootBusy`` naming the holder at once; ``files.StorageError`` where the folder cannot be locked."""
    root = files.make_dir(Path(run_root))
    try:
        folder = os.open(root, os.O_RDONLY | os.O_DIRECTORY)
    except OSError as exc:
        raise files.storage_error(root, exc, "open the run root") from None
    try:
        try:
            fcntl.flock(folder, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise RunRootBusy(f"run_root {root} is in use by {_holder(RunRoot(root).lock)}; wait for it to finish (or "
                              "stop it), or use another run_root") from None
        except OSError as exc:  # a file system that cannot lock a folder
            raise files.storage_error(root, exc, "lock the run root") from None
        with files.holding(root, folder), _named_holder(RunRoot(root).lock, what) as path:
            yield path
    finally:
        os.close(folder)  # closing the descriptor releases the lock


@contextmanager
def _named_holder(path: Path, what: str) -> Iterator[Path]:
    """Write who holds the run root into ``path`` (opened without following a link, and only if it is a file) and
    hold ``flock`` on it too for the block: a driver of an earlier version, which locks only this file, is refused
    by this one and refuses it, rather than running the same cells beside it."""
    try:
        descriptor = os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK, files.FILE_MODE)
    except OSError as exc:  # a folder or a link of that name, a read-only run root
        raise files.storage_error(path, exc, "open the lock file") from None
    with open(descriptor, "r+") as handle:  # closing it releases the file's lock
        if not stat.S_ISREG(os.fstat(descriptor).st_mode):
            raise files.StorageError(f"cannot open the lock file {path}: not a regular file (remove it)")
        try:
            fcntl.flock(descriptor, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise RunRootBusy(f"run_root {path.parent} is in use by {_holder(path)} (an earlier version, which locks "
                              "only its .lock file); wait for it to finish (or stop it), or use another "
                              "run_root") from None
        os.fchmod(descriptor, files.FILE_MODE)  # also a lock file an older version made world-readable
        handle.truncate()
        handle.write(json.dumps({"host": socket.gethostname(), "pid": os.getpid(), "what": what,
                                 "command": " ".join(redact(arg) for arg in sys.argv),
                                 "since": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}))
        handle.flush()
        yield path


def _holder(path: Path) -> str:
    """Who ``path`` names as the holder, read without following a link and no more than a note's size."""
    try:
        descriptor = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
        with open(descriptor, "rb") as handle:
            info = json.loads(handle.read(_MAX_HOLDER_BYTES)) if stat.S_ISREG(os.fstat(descriptor).st_mode) else {}
        return f"{info['what']} (pid {info['pid']} on {info['host']}, since {info['since']}: {info['command']})"
    except (OSError, ValueError, KeyError, TypeError):
        return "another driver (its lock file names no holder)"
