"""A local sqlite MLflow store (``sqlite:///<run_root>/mlflow.db``, the default): made whole, checked before use,
and following its run root when the root is copied or moved.

MLflow makes a new sqlite store by running some forty schema migrations in place, one after another
(``mlflow.store.db.utils._initialize_tables``); a driver stopped half-way leaves a store every later MLflow call
fails on ("table trace_info already exists"), and two drivers making one store at once race on its migrations
("duplicate column name"). So ``prepare`` builds a missing store under a temporary name and links it into place
only once whole (``os.link`` refuses to replace one another process linked first: the loser uses the winner's), and
checks an existing one (``problem``) before MLflow touches it: a store not at this MLflow's schema is
``StoreUnusable``, named, and ``sync-mlflow`` sets it aside and rebuilds it from Parquet (``set_aside``); one a
driver was killed writing to is sound, its unfinished transaction rolled back by that check (SQLite's own recovery).

MLflow stores absolute artifact locations (``file:///old/root/mlartifacts/...``) and our dataset inputs name the
results folder absolutely; a run root's own store is rewritten to its current place on opening (``relocate``), so
a copied run root's ``report`` and UI use the copy's files, never the original's.
"""

from __future__ import annotations

import contextlib
import logging
import os
import re
import sqlite3
import time
import uuid
from pathlib import Path

from orchestrator import files, mlflow_server
from orchestrator.redact import redact
from orchestrator.run_root import ARTIFACTS, STORE, RunRoot

_log = logging.getLogger(__name__)

# what SQLite keeps beside a database, named after it: the rollback journal, the write-ahead log and its index
# (https://www.sqlite.org/tempfiles.html)
SIDE_FILES = ("-journal", "-wal", "-shm")
# (table, column) of MLflow's schema that hold file URIs under a run root: artifact locations and dataset sources
_URI_COLUMNS = (("experiments", "artifact_location"), ("runs", "artifact_uri"), ("datasets", "dataset_source"),
                ("logged_models", "artifact_location"), ("model_versions", "source"),
                ("model_versions", "storage_location"))
EMPTY_STORE_BYTES = 954_368  # a new store of MLflow 3.17's schema and no runs (measured 2026-12-02)
_OUR_ARTIFACTS = re.compile(rf"(file://.*?)/{re.escape(ARTIFACTS)}(?:/.*)?")


class StoreUnusable(RuntimeError):
    """An sqlite store MLflow cannot use as it is; the message names it, why, and what to do."""


class StoreLocked(StoreUnusable):
    """An sqlite store another process holds locked: sound, but not usable now (never set aside for it)."""


# how long the check waits for another process's lock on a store: MLflow's own writes hold it for milliseconds
LOCK_WAIT_S = 2.0


def sqlite_path(tracking_uri: str) -> Path | None:
    """The file of a ``sqlite:///`` tracking URI, else None."""
    return Path(tracking_uri.removeprefix("sqlite:///")) if tracking_uri.startswith("sqlite:///") else None


def prepare(tracking_uri: str, run_root: Path | None = None) -> None:
    """Before MLflow opens ``tracking_uri``: an sqlite store missing is created whole (artifacts under
    ``run_root/mlartifacts``), one present is checked (``StoreUnusable``), and one that is a run root's own
    (``run_root/mlflow.db``; without ``run_root``, an ``mlflow.db`` beside a ``results/`` folder) is relocated to
    it; inside a run root this driver holds, a store reached through a link is refused (``files.check_path``). A
    server that does not answer is ``StoreUnusable`` at once (``mlflow_server.unanswered``); other URIs are left to
    MLflow."""
    path = sqlite_path(tracking_uri)
    if path is None:
        if (reason := mlflow_server.unanswered(tracking_uri)) is not None:
            raise StoreUnusable(f"MLflow at {redact(tracking_uri)} does not answer ({reason})")
        return
    files.check_path(path)
    if run_root is None and path.name == STORE and RunRoot(path.parent).results.is_dir():
        run_root = path.parent
    if not path.exists():
        create(path, RunRoot(run_root or path.parent).artifacts)
        return
    reason = problem(path)  # StoreLocked
    if reason is not None:
        raise StoreUnusable(f"the store {path} {reason}: a sweep interrupted while it made the store, or another "
                            f"MLflow version; `wavealign sync-mlflow run_root={run_root or path.parent}` sets it aside "
                            "and rebuilds it from Parquet (or upgrade it: mlflow db upgrade)")
    if run_root is not None and path.resolve() == RunRoot(run_root).store.resolve():
        relocate(path, Path(run_root))


def create(path: Path, artifact_root: Path) -> None:
    """Build the store under a temporary name beside ``path`` and link it into place whole (``files.FILE_MODE``:
    its tags hold repro commands). If another process linked its own first, that one is kept."""
    from mlflow.store.tracking.sqlalchemy_store import SqlAlchemyStore

    files.make_dir(path.parent)
    tmp = path.with_name(f".{path.name}.{uuid.uuid4().hex[:8]}.building")
    try:
        store = SqlAlchemyStore(f"sqlite:///{tmp}", artifact_root.resolve().as_uri())
        store.engine.dispose()  # its connections closed: nothing writes to the file after it is linked
        os.chmod(tmp, files.FILE_MODE)
        with contextlib.suppress(FileExistsError):  # another driver made it meanwhile: theirs is whole too
            os.link(tmp, path)
    except OSError as exc:
        raise files.storage_error(path, exc, "create the MLflow store") from None
    finally:
        for leftover in path.parent.glob(f"{tmp.name}*"):  # the file and any journal sqlite left
            leftover.unlink(missing_ok=True)


def problem(path: Path) -> str | None:
    """Why MLflow cannot use the sqlite store at ``path``, or None: not an SQLite database, or its schema is not at
    this MLflow's latest revision (what MLflow's own check requires: ``mlflow.store.db.utils._verify_schema``).

    Opened for writing, though it only reads: a driver killed inside a commit leaves its half-written transaction
    in the file and the journal that undoes it beside it (a "hot journal"), and SQLite rolls that back on the next
    read, but only on a connection that may write; a read-only one fails ("attempt to write a readonly database"),
    which would call a sound store unusable (https://www.sqlite.org/atomiccommit.html#hot_journals).

    A store another process holds locked past ``LOCK_WAIT_S`` is ``StoreLocked`` (raised: it is not unusable, and
    ``sync-mlflow`` must not set it aside), rather than waiting on it for minutes."""
    from mlflow.store.db.utils import _get_latest_schema_revision

    try:
        with contextlib.closing(sqlite3.connect(f"{path.resolve().as_uri()}?mode=rw", uri=True,
                                                timeout=LOCK_WAIT_S)) as db:
            tables = {name for (name,) in db.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
            revision = (db.execute("SELECT version_num FROM alembic_version").fetchone() or [None])[0] \
                if "alembic_version" in tables else None
    except sqlite3.OperationalError as exc:
        if exc.sqlite_errorcode in (sqlite3.SQLITE_BUSY, sqlite3.SQLITE_LOCKED):
            raise StoreLocked(f"the store {path} is locked by another process (held for over {LOCK_WAIT_S:g} s); "
                              "try again once it is done") from None
        return f"is not an SQLite database MLflow can read ({exc})"
    except sqlite3.DatabaseError as exc:
        return f"is not an SQLite database MLflow can read ({exc})"
    head = _get_latest_schema_revision()
    if revision != head:
        return (f"is half-built or of another MLflow: its schema is at revision {revision}, this MLflow's is {head} "
                f"({len(tables)} tables)")
    return None


def set_aside(path: Path) -> Path:
    """Move an unusable store out of the way (kept, with the time in its name) with the files SQLite keeps beside it
    (``SIDE_FILES``), under the matching names; returns where it went. SQLite finds a journal or write-ahead log by
    its database's name: one left behind would be rolled into the store rebuilt in its place, and the store set
    aside would lose the transactions it holds."""
    target = path.with_name(f"{path.name}.unusable-{time.strftime('%Y%m%dT%H%M%S', time.gmtime())}")
    try:
        for suffix in SIDE_FILES:  # before the database: a store rebuilt at ``path`` never meets its old journal
            with contextlib.suppress(FileNotFoundError):
                os.replace(path.with_name(path.name + suffix), target.with_name(target.name + suffix))
        os.replace(path, target)
    except OSError as exc:
        raise files.storage_error(path, exc, "move aside") from None
    return target


def relocate(path: Path, run_root: Path) -> int:
    """Rewrite the file URIs in ``run_root``'s own store (``_URI_COLUMNS``) that point into another run root (the
    one it was copied or moved from, found from our ``mlartifacts`` locations) to ``run_root``; returns the values
    changed (0 when the store is where it was made)."""
    new = run_root.resolve().as_uri() + "/"
    try:
        with contextlib.closing(sqlite3.connect(path)) as db, db:
            return _relocate_in(db, new)
    except sqlite3.OperationalError as exc:
        if exc.sqlite_errorcode not in (sqlite3.SQLITE_READONLY, sqlite3.SQLITE_CANTOPEN):
            raise
        # a run root read where it is, read-only (a shared or archived copy): its store is read as it stands, its
        # artifact links still naming where it was made
        _log.warning("mlflow: the store %s is read-only; its artifact locations are left as they were (%s)", path,
                     exc)
        return 0


def _relocate_in(db: sqlite3.Connection, new: str) -> int:
    """``relocate``'s rewrite in an open store: the values changed."""
    locations = [loc for (loc,) in db.execute("SELECT artifact_location FROM experiments") if loc]
    old_roots = {m.group(1) + "/" for loc in locations if (m := _OUR_ARTIFACTS.fullmatch(loc))} - {new}
    changed = 0
    for old in sorted(old_roots):
        for table, column in _URI_COLUMNS:
            if column not in {row[1] for row in db.execute(f"PRAGMA table_info({table})")}:
                continue  # a table or column this MLflow version does not have
            changed += db.execute(f"UPDATE {table} SET {column} = ? || substr({column}, ?) "
                                  f"WHERE substr({column}, 1, ?) = ?", (new, len(old) + 1, len(old), old)).rowcount
    return changed
