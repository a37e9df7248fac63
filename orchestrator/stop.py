"""Stopping a sweep on Ctrl-C (SIGINT) or SIGTERM, in whichever phase it is, the same way every time.

``install`` puts one handler on both signals (``handling``: for the length of a block), first thing in
``wavealign sweep``, before the imports, the run-root lock, MLflow's set-up and Ray's start. The handler writes down
which signal came, then raises ``KeyboardInterrupt`` so that the phase under way stops. The note is what counts: a
``KeyboardInterrupt`` raised inside a callback that swallows exceptions (SQLAlchemy's connection clean-up, a
``__del__``) is lost, but the dispatch loop and the exit code read ``requested``, so the sweep stops all the same.
Once a sweep is ending (``deferred``: the MLflow drain, the run record, the summary, the end of its MLflow parent
run), a signal is only noted: the ending runs whole, and a signal during the MLflow drain stops just the drain
(``sync-mlflow`` logs the rest from Parquet).
"""

from __future__ import annotations

import signal
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

SIGNALS = (signal.SIGINT, signal.SIGTERM)
EXIT_CODES = {"SIGINT": 130, "SIGTERM": 143}  # 128 + the signal's number, as a shell reports it

requested: str | None = None  # the first signal's name since ``reset``
count = 0  # signals since ``reset``: a new one during the MLflow drain stops it
_raising = True


def reset() -> None:
    global requested, count
    requested, count = None, 0


def note(name: str) -> None:
    """Record a stop request (``SIGINT``/``SIGTERM``), as the handler does."""
    global requested, count
    requested = requested or name
    count += 1


def _handle(signum: int, frame: Any) -> None:
    note(signal.Signals(signum).name)
    if _raising:
        raise KeyboardInterrupt


def install() -> None:
    """Handle SIGINT and SIGTERM as above (from the main thread only; elsewhere nothing changes)."""
    if threading.current_thread() is threading.main_thread():
        for signum in SIGNALS:
            signal.signal(signum, _handle)


@contextmanager
def handling() -> Iterator[None]:
    """``install`` for the block, then the handlers found before it back. Where they were ours already (``wavealign
    sweep`` installs them first thing) what was noted is kept; a caller of its own (a test, a notebook) starts
    afresh."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = [signal.getsignal(signum) for signum in SIGNALS]
    if any(handler is not _handle for handler in previous):
        reset()
    hook = sys.unraisablehook

    def unraisable(event: Any) -> None:
        # our KeyboardInterrupt, lost in a callback that swallows exceptions (logging's fork hooks, a __del__): it is
        # noted already, and Python would print it as a traceback ("Exception ignored in ...")
        if not (isinstance(event.exc_value, KeyboardInterrupt) and requested):
            hook(event)

    sys.unraisablehook = unraisable
    try:  # installed inside: a signal that raises at once still has the handlers found before put back
        install()
        yield
    finally:
        sys.unraisablehook = hook
        for signum, handler in zip(SIGNALS, previous, strict=True):
            signal.signal(signum, handler)


def exit_code() -> int | None:
    """130 after Ctrl-C, 143 after SIGTERM, None if no signal came."""
    return EXIT_CODES.get(requested) if requested else None


@contextmanager
def deferred() -> Iterator[None]:
    """While the block runs, a signal is noted, never raised."""
    global _raising
    before, _raising = _raising, False
    try:
        yield
    finally:
        _raising = before


@contextmanager
def around_ray_init() -> Iterator[None]:
    """Around ``ray.init``: it replaces the SIGTERM handler with its own (``sys.exit(signum)``, set before it connects:
    ray/_private/worker.py, ``init``); a SIGTERM then is a stop request like any other, and ours is put back after."""
    try:
        yield
    except SystemExit as exc:
        if exc.code != signal.SIGTERM:
            raise
        note("SIGTERM")
        raise KeyboardInterrupt from None
    finally:
        install()
