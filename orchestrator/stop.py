"""Stopping a sweep on Ctrl-C (SIGINT), SIGTERM, SIGHUP (its terminal closed) or SIGQUIT (Ctrl-\\), in whichever
phase it is, the same way every time: one line, the summary where the sweep began, exit 128 + the signal's number.

``install`` puts one handler on these signals (``handling``: for the length of a block), first thing in
``wavealign sweep``, before the imports, the run-root lock, MLflow's set-up and Ray's start. The handler writes down
which signal came, then raises ``KeyboardInterrupt`` so that the phase under way stops, though never inside an
import: a module whose import is stopped half-way stays half-made in ``sys.modules``, and the ending's own
imports of it then fail (an interrupted ``import mlflow`` made the run's end a 72-line ``RecursionError``). A
signal that lands in an import is raised again the moment the import is over (``_after_import``). The note is what
counts: a ``KeyboardInterrupt`` raised inside a callback that swallows exceptions (SQLAlchemy's connection clean-up, a
``__del__``) is lost, but the dispatch loop and the exit code read ``requested``, so the sweep stops all the same.
Once a sweep is ending (``deferred``: the MLflow drain, the run record, the summary, the end of its MLflow parent
run), a signal is only noted: the ending runs whole, and a signal during the MLflow drain stops just the drain
(``sync-mlflow`` logs the rest from Parquet).
"""

from __future__ import annotations

import _thread
import signal
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGQUIT)
EXIT_CODES = {signum.name: 128 + signum for signum in SIGNALS}  # as a shell reports it: 130, 143, 129, 131
# the code of a module being imported runs under frames of these files (importlib's own, frozen into Python)
_IMPORT_FILES = frozenset({"<frozen importlib._bootstrap>", "<frozen importlib._bootstrap_external>"})
_IMPORT_POLL_S = 0.01

requested: str | None = None  # the first signal's name since ``reset``
count = 0  # signals since ``reset``: a new one during the MLflow drain stops it
_raising = True
_waiter: threading.Thread | None = None  # waits for the import a signal landed in to end (``_after_import``)
_redelivered = False  # the signal the waiter delivers again, noted when it first came


def reset() -> None:
    global requested, count, _redelivered
    requested, count, _redelivered = None, 0, False


def note(name: str) -> None:
    """Record a stop request (``SIGINT``/``SIGTERM``), as the handler does."""
    global requested, count
    requested = requested or name
    count += 1


def _handle(signum: int, frame: Any) -> None:
    global _redelivered
    if _redelivered:  # the signal that landed in an import, noted then, delivered again after it
        _redelivered = False
    else:
        note(signal.Signals(signum).name)
    if not _raising:
        return
    if _importing(frame):
        _after_import(signum)
        return
    raise KeyboardInterrupt


def _importing(frame: Any) -> bool:
    """Whether ``frame`` runs inside an import (a module's code, or importlib finding or loading it)."""
    while frame is not None:
        if frame.f_code.co_filename in _IMPORT_FILES:
            return True
        frame = frame.f_back
    return False


def _after_import(signum: int) -> None:
    """Deliver ``signum`` to the main thread again (``_thread.interrupt_main``: the handler runs as for the signal
    itself) as soon as the main thread is out of every import; one waiter at a time."""
    global _waiter
    if _waiter is not None and _waiter.is_alive():
        return
    main = threading.main_thread().ident

    def wait() -> None:
        global _redelivered
        while _importing(sys._current_frames().get(main)):
            time.sleep(_IMPORT_POLL_S)
        _redelivered = True
        _thread.interrupt_main(signum)

    _waiter = threading.Thread(target=wait, name="wavealign-stop-after-import", daemon=True)
    _waiter.start()


def install() -> None:
    """Handle ``SIGNALS`` as above (from the main thread only; elsewhere nothing changes)."""
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
    """130 after Ctrl-C, 143 after SIGTERM, 129 after SIGHUP, 131 after SIGQUIT, None if no signal came."""
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
