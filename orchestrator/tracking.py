"""MLflow recording, from the driver only: a parent run per sweep, a child run per dataset row.

Parquet is the record of truth; MLflow is a view of it. Every child run carries the row's ``result_id``,
and ``record.sync`` logs whatever rows MLflow lacks (after an unreachable server, or a driver killed
between the Parquet write and the MLflow calls), so runs and rows match one to one. A child run is complete once
its ``wavealign.logged`` tag is set, in the same ``log_batch`` call as its params and metrics.

A sweep's parent run carries its grids and variants as params (``grid.backend`` = ``["reference"]``), and, when
the sweep ends, its cell counts, wall times and median speedups as metrics; it is RUNNING while a driver runs the
sweep (reopened on resume) and FINISHED, KILLED or FAILED after. A child run's name leads with what tells it from
its neighbours in the runs table: method, length and launch order, then hardware/backend and the cell id.

MLflow 3's UI shows an experiment either as GenAI work, where a run opens on its "Evaluations" tab, or as machine
learning, where it opens as an ordinary run with its params and metrics: the experiment tag ``mlflow.experimentKind``
decides (``genai_development`` or ``custom_model_development``), and the UI infers and saves one where it is
unset (MLflow's ``server/js`` experiment-kind inference). The sweep's experiment is tagged machine learning.
"""

from __future__ import annotations

import contextlib
import hashlib
import itertools
import json
import logging
import math
import os
import queue
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa
from mlflow.entities import Dataset, DatasetInput, Metric, Param, Run, RunTag
from mlflow.exceptions import MlflowException
from mlflow.tracking import MlflowClient
from mlflow.utils.validation import MAX_ENTITY_KEY_LENGTH, MAX_PARAMS_TAGS_PER_BATCH
from omegaconf import OmegaConf

from orchestrator import dataset, sqlite_store  # sqlite_store bounds MLflow's retries (mlflow_server)
from orchestrator.files import StorageError
from orchestrator.redact import redact
from orchestrator.run_root import RunRoot
from wavealign import metrics as metrics_lib  # the local name metrics is MLflow's, in the logging code
from wavealign import variants
from wavealign.records import order_name

TAG = "wavealign."
# on a child run whose row is no longer in Parquet (``record.sync`` finds them): MLflow is a view, and this part of it
# shows a row the dataset lost
ORPHAN_TAG = f"{TAG}in_parquet=0"
STATUS_REASON_TAG = f"{TAG}status_reason"  # why a sweep's parent run ended other than FINISHED
# what one child run costs a local sqlite store, its params, metrics and tags (measured 2026-12-02: 10 runs of the
# reference backend grew a new store from 954,368 to 1,150,976 bytes, 19.7 KB each)
CHILD_RUN_BYTES = 20_000
_IDS = ("cell_id", "group_id", "result_id", "sweep_id")
# Generated from the dataset schema (itself generated from wavealign.records): a cell's config is its params;
# ids and every other text or yes/no column its tags (the traceback stays in Parquet); numbers its metrics.
PARAM_COLUMNS = tuple(c for c in dataset.CELL_COLUMNS if c not in _IDS)
TAG_COLUMNS = (*_IDS, "worker_pid", "run_seq", *(f.name for f in dataset.SCHEMA
                        if (pa.types.is_string(f.type) or pa.types.is_boolean(f.type))
                        and f.name not in (*_IDS, *PARAM_COLUMNS, "traceback", "cell_json", "sweep_name")))
_MAX_VALUE_CHARS = 5000  # under MLflow's limits on param (6000) and tag (8000) values
# the config sections that say what a sweep measures, logged as the parent run's params
SWEEP_PARAM_SECTIONS = ("grid", "extra_grids", "variants")
# MLflow 3's UI opens an experiment on its GenAI pages; this query opens its runs table ("Model training")
UI_RUNS_QUERY = "workflowType=machine_learning"
MLFLOW_UI_ADDRESS = "http://127.0.0.1:5000"  # where `mlflow ui` serves by default
# MLflow 3's UI opens a run of an experiment of this kind as an ordinary run, not on GenAI's "Evaluations" tab
EXPERIMENT_KIND = ("mlflow.experimentKind", "custom_model_development")

_log = logging.getLogger(__name__)
# MLflow's sqlite layer logs every database error with its traceback before raising it; the Tracker reports each
# failure itself (one line naming the cause), so those would only repeat it
logging.getLogger("mlflow.store.db.utils").setLevel(logging.CRITICAL)


def default_tracking_uri(run_root: str | Path) -> str:
    """The store of ``run_root`` (``RunRoot.tracking_uri``)."""
    return RunRoot(Path(run_root)).tracking_uri


def ui_hint(tracking_uri: str, experiment_id: str | None, mlflow: str = "mlflow") -> str:
    """How to open this store's runs table in the MLflow UI: a server's address, or the ``mlflow ui`` command
    (``mlflow``: how to run MLflow's CLI here) for a local store and then the address it serves."""
    tracking_uri = redact(tracking_uri)
    if tracking_uri.startswith(("http://", "https://")):
        return f"open {experiment_address(tracking_uri, experiment_id)}"
    return (f"{mlflow} ui --backend-store-uri {tracking_uri}\n"
            f"  then open {experiment_address(MLFLOW_UI_ADDRESS, experiment_id)}")


def experiment_address(server: str, experiment_id: str | None) -> str:
    """The UI page of ``experiment_id``'s runs table on ``server`` (the server itself without an experiment)."""
    if experiment_id is None:
        return server
    return f"{server.rstrip('/')}/#/experiments/{experiment_id}?{UI_RUNS_QUERY}"


class Tracker:
    """An MLflow client that turns itself off, with a reason, at the first failure: the sweep goes on. ``warn``: say
    so at once, as a warning (False for a caller that reports ``down_reason`` itself)."""

    def __init__(self, tracking_uri: str, experiment: str, run_root: Path | None = None, warn: bool = True) -> None:
        self.tracking_uri = tracking_uri
        self.warn = warn
        self.experiment_name = experiment
        self.down_reason: str | None = None
        self.client: MlflowClient | None = None
        # result ids of the complete child runs this client found or logged: what it knows MLflow holds once it fails
        self.logged: set[str] = set()
        self.experiment_id = self._guard(lambda: self._connect(run_root))

    @property
    def available(self) -> bool:
        return self.down_reason is None

    def _guard(self, action):
        if not self.available:
            return None
        try:
            return action()
        except Exception as exc:  # any failure of the tracking service: record it, keep the sweep going
            self.down_reason = self._cause(exc)
            # Parquet keeps every row either way: one line on the console, the traceback at debug level (it tells
            # an outage from a bug in our logging)
            _log.log(logging.WARNING if self.warn else logging.DEBUG,
                     "MLflow logging stopped for this sweep (%s); sync-mlflow can catch up later", self.down_reason)
            _log.debug("MLflow failure", exc_info=True)
            return None

    def _cause(self, exc: Exception) -> str:
        """What went wrong, in words: a local sqlite store that is unusable, vanished or turned read-only says so."""
        if isinstance(exc, sqlite_store.StoreUnusable | StorageError):
            return str(exc)
        if self.tracking_uri.startswith("sqlite:///"):
            path = Path(self.tracking_uri.removeprefix("sqlite:///"))
            if self.client is not None and not path.exists():
                return f"the store {path} no longer exists (deleted while the sweep ran)"
            if path.exists() and not os.access(path, os.W_OK):
                return f"the store {path} is read-only"
        text = str(exc).strip().splitlines()
        return redact(f"{type(exc).__name__}: {text[0] if text else ''}")

    def _connect(self, run_root: Path | None) -> str:
        """The client and the experiment's id (created, with its artifacts under ``run_root/mlartifacts`` for a
        local store, if it does not exist); a local sqlite store is made whole or checked first
        (``sqlite_store.prepare``)."""
        sqlite_store.prepare(self.tracking_uri, run_root)
        self.client = MlflowClient(tracking_uri=self.tracking_uri)
        found = self.client.get_experiment_by_name(self.experiment_name)
        key, kind = EXPERIMENT_KIND
        if found is not None:
            if key not in found.tags:  # one made before the tag: a kind the user set (or the UI saved) is kept
                with contextlib.suppress(MlflowException):  # a view's setting: a store that refuses it still logs
                    self.client.set_experiment_tag(found.experiment_id, key, kind)
            return found.experiment_id
        local = not self.tracking_uri.startswith(("http://", "https://", "databricks"))
        location = RunRoot(Path(run_root)).artifact_uri if (run_root and local) else None
        return self.client.create_experiment(self.experiment_name, artifact_location=location, tags={key: kind})

    def parent_run(self, sweep_id: str, sweep_name: str, config_path: Path | None = None) -> str | None:
        """The sweep's parent run (found again on resume; its status unchanged), with the resolved config as
        an artifact and its grids and variants as params (``sweep_params``)."""
        def find_or_create() -> str:
            runs = self.client.search_runs(
                [self.experiment_id], f"tags.`{TAG}sweep_id` = '{sweep_id}' and tags.`{TAG}kind` = 'sweep'",
                max_results=1)
            if runs:
                run_id, has_params = runs[0].info.run_id, bool(runs[0].data.params)
            else:
                run = self.client.create_run(self.experiment_id, run_name=f"{sweep_name}-{sweep_id[:8]}",
                                             tags={f"{TAG}kind": "sweep", f"{TAG}sweep_id": sweep_id,
                                                   f"{TAG}sweep_name": sweep_name})
                run_id, has_params = run.info.run_id, False
                if config_path is not None and config_path.is_file():
                    self.client.log_artifact(run_id, str(config_path))
            if not has_params and config_path is not None and config_path.is_file():
                params = [Param(k, v) for k, v in sweep_params(OmegaConf.to_container(OmegaConf.load(config_path)))]
                for start in range(0, len(params), MAX_PARAMS_TAGS_PER_BATCH):
                    self.client.log_batch(run_id, params=params[start:start + MAX_PARAMS_TAGS_PER_BATCH])
            return run_id
        return self._guard(find_or_create)

    def reopen(self, parent_run_id: str | None) -> None:
        """Mark the parent run RUNNING again: a driver runs (or resumes) its sweep."""
        if parent_run_id is not None:
            self._guard(lambda: self.client.update_run(parent_run_id, status="RUNNING"))

    def finish(self, parent_run_id: str | None, status: str, metrics: dict[str, float] | None = None,
               reason: str | None = None) -> None:
        """Log the sweep's ``metrics`` to its parent run and end it with ``status`` (FINISHED, KILLED, FAILED), the
        ``reason`` for a status other than FINISHED as its ``STATUS_REASON_TAG`` (shown beside the run's status)."""
        def end() -> None:
            now_ms = int(time.time() * 1000)
            self.client.log_batch(parent_run_id, metrics=[Metric(k, float(v), now_ms, 0)
                                                          for k, v in sorted((metrics or {}).items())],
                                  tags=[RunTag(STATUS_REASON_TAG, reason)] if reason else [])
            self.client.set_terminated(parent_run_id, status)
        if parent_run_id is not None:
            self._guard(end)

    def log_cluster(self, parent_run_id: str | None, cluster: dict[str, Any]) -> None:
        """Tag the parent run with the Ray cluster its latest run joined (``join.JoinedCluster``'s fields as
        ``wavealign.cluster.<field>``): tags, not params, since a resumed sweep may join another cluster."""
        tags = [RunTag(f"{TAG}cluster.{k}", _text(v if isinstance(v, str) else json.dumps(v, sort_keys=True)))
                for k, v in cluster.items()]
        if parent_run_id is not None:
            self._guard(lambda: self.client.log_batch(parent_run_id, tags=tags))

    def get_run(self, run_id: str | None) -> Run | None:
        if run_id is None:
            return None
        return self._guard(lambda: self.client.get_run(run_id))

    def _child_runs(self, sweep_id: str) -> Iterator[Run]:
        """Every child run of ``sweep_id``, a page at a time."""
        token = None
        while True:
            page = self.client.search_runs(
                [self.experiment_id], f"tags.`{TAG}sweep_id` = '{sweep_id}' and tags.`{TAG}kind` = 'cell'",
                max_results=1000, page_token=token)
            yield from page
            token = page.token
            if not token:
                return

    def logged_result_ids(self, sweep_id: str) -> set[str] | None:
        """``result_id`` of every complete child run of ``sweep_id``; incomplete ones are deleted."""
        def collect() -> set[str]:
            found = set()
            for run in self._child_runs(sweep_id):
                if run.data.tags.get(f"{TAG}logged") == "1":
                    found.add(run.data.tags[f"{TAG}result_id"])
                else:  # created, then the driver died before its log_batch: log it again
                    self.client.delete_run(run.info.run_id)
            self.logged |= found
            return found
        return self._guard(collect)

    def flag_orphans(self, sweep_id: str, result_ids: set[str]) -> None:
        """Tag ``ORPHAN_TAG`` on the child runs of ``sweep_id`` whose rows (``result_ids``) Parquet no longer has."""
        key, value = ORPHAN_TAG.split("=")

        def flag() -> None:
            for run in self._child_runs(sweep_id):
                if run.data.tags.get(f"{TAG}result_id") in result_ids and run.data.tags.get(key) != value:
                    self.client.set_tag(run.info.run_id, key, value)
        self._guard(flag)

    def log_rows(self, parent_run_id: str | None, rows: Iterable[dict[str, Any]],
                 abandon: Callable[[], bool] = lambda: False) -> int:
        """One child run per row: create it, then one ``log_batch`` of params, metrics and tags; ``abandon()``
        turning true (checked before each row) stops it there. Returns the rows logged."""
        def log() -> int:
            count = 0
            for row in itertools.takewhile(lambda _: not abandon(), rows):
                self._log_row(parent_run_id, row)
                count += 1
            return count
        if parent_run_id is None:
            return 0
        return self._guard(log) or 0

    def _log_row(self, parent_run_id: str, row: dict[str, Any]) -> None:
        started = row.get("started_at") or row.get("recorded_at")
        start_ms = int(_epoch_s(started) * 1000) if started is not None else None
        run = self.client.create_run(
            self.experiment_id, start_time=start_ms,
            run_name=run_name(row),
            tags={"mlflow.parentRunId": parent_run_id, f"{TAG}kind": "cell",
                  f"{TAG}sweep_id": row["sweep_id"], f"{TAG}result_id": row["result_id"]})
        params = [Param(k, _text(row[k])) for k in PARAM_COLUMNS if row.get(k) is not None]
        metrics = [Metric(k, float(v), start_ms or 0, 0) for k, v in _metrics(row)]
        tags = [RunTag(f"{TAG}{k}", _text(row[k])) for k in TAG_COLUMNS if row.get(k) is not None]
        tags.append(RunTag(f"{TAG}logged", "1"))
        self.client.log_batch(run.info.run_id, metrics=metrics, params=params, tags=tags)
        self.logged.add(row["result_id"])
        finished = row.get("finished_at")
        self.client.set_terminated(run.info.run_id, "FINISHED" if row["status"] == "done" else "FAILED",
                                   end_time=int(_epoch_s(finished) * 1000) if finished is not None else None)

    def log_dataset(self, parent_run_id: str | None, run_root: Path, summary_path: Path | None = None) -> None:
        """Attach the Parquet dataset (as an MLflow dataset input) and the summary table to the parent run."""
        def attach() -> None:
            folder = dataset.results_dir(run_root).resolve()
            files = sorted(str(p.relative_to(folder)) for p in folder.rglob("*.parquet"))
            digest = hashlib.sha256("\n".join(files).encode()).hexdigest()[:32]
            entity = Dataset(name="wavealign-results", digest=digest, source_type="local",
                             source=_results_uri(run_root),
                             schema=dataset.SCHEMA.to_string(show_schema_metadata=False)[:6000])
            self.client.log_inputs(parent_run_id, datasets=[DatasetInput(dataset=entity, tags=[])])
            if summary_path is not None and summary_path.is_file():
                self.client.log_artifact(parent_run_id, str(summary_path))
        if parent_run_id is not None:
            self._guard(attach)


def run_name(row: dict[str, Any]) -> str:
    """A child run's name, what tells it from its neighbours first (the runs table cuts long names):
    ``xattention 147,600 wavealign h100/fa4 1a2b3c4d``, with ``simulated`` after the order for a prediction."""
    simulated = " simulated" if row.get("simulated") else ""
    return (f"{row['method']} {row['seq_len_tokens']:,} {order_name(row['variant'], row.get('reorderer'))}"
            f"{simulated} {row['hardware']}/{row['backend']} {row['cell_id'][:8]}")


def has_dataset(run: Run, run_root: Path) -> bool:
    """Whether ``run`` has ``run_root``'s results folder as a dataset input (``log_dataset``): what
    ``analysis.load`` follows from an experiment to its rows."""
    source = _results_uri(run_root)
    return any(d.dataset.source == source for d in (run.inputs.dataset_inputs if run.inputs else []))


class BackgroundLogger:
    """Logs the rows of results files on one driver thread, so workers are not kept waiting on MLflow (a child run
    costs a few store round trips); ``close`` waits until everything submitted is logged. It is handed the files,
    not the rows, and reads each batch when it comes to it: a backlog (MLflow slower than the cells) holds paths."""

    def __init__(self, tracker: Tracker, parent_run_id: str | None, run_root: Path) -> None:
        self.tracker, self.parent_run_id, self.run_root = tracker, parent_run_id, run_root
        self._queue: queue.Queue[list[Path] | None] = queue.Queue()
        self._abandoned = threading.Event()
        self._thread = threading.Thread(target=self._drain, name="wavealign-mlflow", daemon=True)
        self._thread.start()

    def submit(self, paths: list[Path]) -> None:
        self._queue.put(list(paths))

    def _drain(self) -> None:
        while (paths := self._queue.get()) is not None:
            rows = dataset.read_written(self.run_root, paths).to_pylist()  # what is still there, whole
            self.tracker.log_rows(self.parent_run_id, rows, self._abandoned.is_set)

    def close(self, abandon: Callable[[], bool] = lambda: False) -> bool:
        """Wait until everything submitted is logged, or until ``abandon()`` turns true (checked every 0.2 s):
        then the thread stops after the row it is logging. True if it caught up."""
        self._queue.put(None)
        while self._thread.is_alive():
            if abandon():
                self._abandoned.set()
                return False
            self._thread.join(timeout=0.2)
        return True

    @property
    def done(self) -> bool:
        """The thread has ended: it reads no more files."""
        return not self._thread.is_alive()


def _results_uri(run_root: Path) -> str:
    return dataset.results_dir(run_root).resolve().as_uri()


def _epoch_s(value: Any) -> float:
    return value.timestamp() if hasattr(value, "timestamp") else float(value)


def _text(value: Any) -> str:
    return str(value)[:_MAX_VALUE_CHARS]


def _metrics(row: dict[str, Any]) -> list[tuple[str, float]]:
    out = []
    for field in dataset.SCHEMA:
        value = row.get(field.name)
        numeric = pa.types.is_floating(field.type) or pa.types.is_integer(field.type)
        numeric = numeric and field.name not in (*PARAM_COLUMNS, *TAG_COLUMNS, "schema_version")
        if numeric and value is not None and not (isinstance(value, float) and math.isnan(value)):
            out.append((field.name, float(value)))
    return out


def sweep_params(config: dict[str, Any]) -> list[tuple[str, str]]:
    """The grids and variants of a resolved sweep config (``SWEEP_PARAM_SECTIONS``) as flat params:
    ``grid.backend`` = ``["reference"]``, ``grid.method_params.xattention.threshold`` = ``[0.8, 0.9]``; text as
    itself, everything else as JSON (an empty map as ``{}``), cut to ``_MAX_VALUE_CHARS``; a key longer than
    MLflow takes is left out (the whole config is the run's ``config.yaml`` artifact)."""
    params: list[tuple[str, str]] = []

    def flatten(key: str, value: Any) -> None:
        if isinstance(value, dict) and value:
            for name, item in value.items():
                flatten(f"{key}.{name}", item)
        elif len(key) <= MAX_ENTITY_KEY_LENGTH:
            params.append((key, _text(value if isinstance(value, str) else json.dumps(value))))

    for section in SWEEP_PARAM_SECTIONS:
        if section in config:
            flatten(section, config[section])
    return params


def _shown_speedup(rows: list[dict[str, Any]], prefix: str, kind: str) -> dict[str, float]:
    """The speedup ``rows`` show together (``metrics.aggregate`` of their ``<prefix>speedup_vs_original`` and its
    interval, judged with the tolerance they recorded), as metrics suffixed ``_<kind>``; none where no row has one."""
    columns = (f"{prefix}speedup_vs_original", f"{prefix}speedup_ci_low", f"{prefix}speedup_ci_high")
    points, lows, highs = ([math.nan if r.get(c) is None else float(r[c]) for r in rows] for c in columns)
    shown = metrics_lib.aggregate(points, lows, highs, predicted=kind == "simulated",
                                  tolerance=metrics_lib.recorded_tolerance([r.get("verdict_tolerance") for r in rows]))
    figures = zip(columns, (shown.point, shown.low, shown.high), strict=True)
    return {f"{column}_{kind}": value for column, value in figures if shown.cells and math.isfinite(value)}


def sweep_metrics(sweep_rows: list[dict[str, Any]], run_record: dict[str, Any] | None) -> dict[str, float]:
    """A sweep parent run's metrics: ``cells_<status>`` over the newest row of each of the sweep's cells; the one
    ``speedup_vs_original`` and ``net_speedup_vs_original`` its done cells of a variant other than the original show
    together, with its interval (``_ci_low``, ``_ci_high``) by ``metrics.AGGREGATE_RULE`` (``metrics.aggregate``: what
    the summary and the report show), and their counts per verdict, measured and simulated apart (``_measured``,
    ``_simulated``); and the wall times and GPU-busy share of its latest run (``run_record``, as
    ``record.write_run_record`` writes it). A run that ran no cell (a resume with every cell done) logs its wall times
    as ``resume_<key>`` instead, so that the parent keeps the ``startup_s`` and ``dispatch_s`` of the run that
    measured."""
    latest = dataset.newest_per_cell(sweep_rows)
    metrics: dict[str, float] = {f"cells_{status}": sum(r["status"] == status for r in latest.values())
                                 for status in dataset.STATUSES}
    reordered = [r for r in latest.values() if r["status"] == "done" and not variants.of_row(r).is_baseline]
    for kind, rows in (("measured", [r for r in reordered if not r.get("simulated")]),
                       ("simulated", [r for r in reordered if r.get("simulated")])):
        for prefix in ("", "net_"):  # never one speedup over predictions and measurements together
            metrics.update(_shown_speedup(rows, prefix, kind))
        for verdict in metrics_lib.VERDICTS:
            counted = sum((r.get("verdict") or "").split(" ")[0] == verdict for r in rows)
            if rows:
                metrics[f"cells_{verdict}_{kind}"] = counted
    ran_cells = run_record is not None and bool(run_record.get("workers"))  # a no-op resume starts none
    for key in ("startup_s", "dispatch_s", "mlflow_drain_s", "kernel_busy_fraction"):
        if run_record is not None and run_record.get(key) is not None:
            metrics[key if ran_cells else f"resume_{key}"] = run_record[key]
    return metrics
