"""One driver per run root: ``sweep`` and ``sync-mlflow`` hold an exclusive lock on ``<run_root>/.lock``.

Two drivers on one run root would run every cell twice and race on the MLflow store's schema. The lock is
``fcntl.flock``: the kernel drops it when the holder exits, however it exits, so a crashed driver never leaves a
stale lock behind. The file names the holder (host, PID, command, start time) so the refusal can say who it is.
"""

from __future__ import annotations

import fcntl
import json
import os
import socket
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from wavealign.orchestrator import files
from wavealign.orchestrator.redact import redact

LOCK_NAME = ".lock"


class RunRootBusy(RuntimeError):
    """Another driver holds the run root; the message names it."""


@contextmanager
def hold(run_root: str | Path, what: str) -> Iterator[Path]:
    """Hold ``<run_root>/.lock`` for the block, or raise ``RunRootBusy`` naming the holder at once."""
    root = files.make_dir(Path(run_root))
    path = root / LOCK_NAME
    try:
        handle = os.fdopen(os.open(path, os.O_RDWR | os.O_CREAT, files.FILE_MODE), "r+")
    except OSError as exc:  # a folder of that name, a read-only run root
        raise files.storage_error(path, exc, "open the lock file") from None
    try:
        os.fchmod(handle.fileno(), files.FILE_MODE)  # also a lock file an older version made world-readable
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            handle.seek(0)
            holder = _holder(handle.read())
            raise RunRootBusy(f"run_root {root} is in use by {holder}; wait for it to finish (or stop it), or use "
                              "another run_root") from None
        handle.seek(0)
        handle.truncate()
        handle.write(json.dumps({"host": socket.gethostname(), "pid": os.getpid(), "what": what,
                                 "command": redact(" ".join(sys.argv)), "since": time.strftime("%Y-%m-%dT%H:%M:%SZ",
                                                                                        time.gmtime())}))
        handle.flush()
        yield path
    finally:
        handle.close()  # closing the descriptor releases the lock


def _holder(text: str) -> str:
    try:
        info = json.loads(text)
        return f"{info['what']} (pid {info['pid']} on {info['host']}, since {info['since']}: {info['command']})"
    except (ValueError, KeyError, TypeError):
        return "another driver (its lock file names no holder)"
