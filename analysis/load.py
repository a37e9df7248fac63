"""Read sweep results into one pandas DataFrame: from a run root's Parquet dataset, or from an MLflow
experiment whose sweep parent runs point at their datasets.

Rows keep the dataset schema's columns (``orchestrator.dataset.SCHEMA``), rows written before today's
fields read in them (``dataset_compat``, as ``dataset.read`` reads), newest row per cell configuration (a cell
re-run with ``force=true``, or re-measured after a code change gave it a new id, appears once); Nsight Compute
figures are the dataset's flat ``ncu_*`` columns.
"""

from __future__ import annotations

import os
from pathlib import Path
from urllib.parse import unquote, urlparse

import pandas as pd

from orchestrator import dataset
from orchestrator.run_root import DEFAULT_RUN_ROOT as DEFAULT_RUN_ROOT
from orchestrator.run_root import RESULTS, RunRoot, run_root_state
from orchestrator.run_root import is_run_root as is_run_root
from wavealign.records import Cell

UNPLACED = "unschedulable"  # the status of a cell no node could take (``dataset.STATUSES``)
SWEEP_KIND_TAG = "wavealign.kind"
SWEEP_ID_TAG = "wavealign.sweep_id"


def load(runs: str | Path = DEFAULT_RUN_ROOT, tracking_uri: str | None = None,
         latest_only: bool = True) -> pd.DataFrame:
    """Every result row of ``runs``: a run root folder, or the name of an MLflow experiment.

    An experiment name is resolved through ``tracking_uri`` (default: ``MLFLOW_TRACKING_URI``, else the
    sqlite store of ``./wavealign-runs``): each sweep parent run's dataset input names its results folder.
    ``df.attrs`` records ``run_roots`` and ``tracking_uri`` for the report.
    """
    if is_run_root(runs):
        roots, sweep_ids = [Path(runs)], None
        uri = tracking_uri or _store_next_to(Path(runs))
    else:
        uri = tracking_uri or os.environ.get("MLFLOW_TRACKING_URI") or _store_next_to(DEFAULT_RUN_ROOT)
        if uri is None:
            raise ValueError(f"runs={str(runs)!r} {run_root_state(runs)}, and names no MLflow experiment: no "
                             f"tracking_uri given and no {RunRoot(DEFAULT_RUN_ROOT).store}")
        roots, sweep_ids = experiment_run_roots(str(runs), uri)
    frames = [dataset.read(root).to_pandas() for root in roots]
    if sweep_ids is not None:
        frames = [f[f["sweep_id"].isin(sweep_ids)] for f in frames]
    if latest_only:  # a run root's own run sequence orders its rows; only rows of two run roots compare by clock
        frames = [latest_per_configuration(f) if len(f) else f for f in frames]
    frame = pd.concat(frames, ignore_index=True) if frames else dataset.SCHEMA.empty_table().to_pandas()
    if latest_only and len(frames) > 1 and len(frame):
        frame = latest_per_configuration(frame, order=("recorded_at",))
    frame = frame.reset_index(drop=True)
    frame.attrs.update(run_roots=[str(r) for r in roots], tracking_uri=uri)
    return frame


def configuration_columns(frame: pd.DataFrame) -> list[str]:
    """The columns that say what a cell measures: every ``records.Cell`` field but its ids (which also hash
    the code's fingerprint), so one configuration measured by two code versions is one configuration."""
    return [name for name in Cell.columns() if name not in ("cell_id", "group_id") and name in frame.columns]


def latest_per_configuration(frame: pd.DataFrame, order: tuple[str, ...] = dataset.ORDER_COLUMNS) -> pd.DataFrame:
    """The newest row (by ``order``: for the rows of one run root, ``dataset.ORDER_COLUMNS``, the run of the run root
    then ``recorded_at``) of each cell configuration, a placed row before any newer unplaced one: a later sweep that
    found no node of a GPU type says nothing about what an earlier one measured there."""
    order = [c for c in order if c in frame.columns]
    ranked = frame.assign(_placed=~is_unplaced(frame)).sort_values(["_placed", *order], kind="stable")
    return ranked.drop_duplicates(configuration_columns(frame), keep="last").drop(columns="_placed")


def is_unplaced(frame: pd.DataFrame) -> pd.Series:
    """Per row: a cell no node could take (status ``UNPLACED``), recorded but never run; the report counts the
    placed cells and lists these apart."""
    if "status" not in frame.columns:
        return pd.Series(False, index=frame.index)
    return frame["status"] == UNPLACED


def _store_next_to(run_root: Path) -> str | None:
    """The default sqlite tracking store of a run root, if it exists."""
    root = RunRoot(run_root)
    return root.tracking_uri if root.store.is_file() else None


def experiment_run_roots(experiment: str, tracking_uri: str) -> tuple[list[Path], set[str]]:
    """Run roots and sweep ids of the sweep parent runs in ``experiment``; a ``ValueError`` naming the store (its
    password redacted) where it does not answer (``mlflow_server.unanswered``, in seconds) or refuses the query."""
    from mlflow.exceptions import MlflowException
    from mlflow.tracking import MlflowClient

    from orchestrator import mlflow_server
    from orchestrator.redact import redact

    if (reason := mlflow_server.unanswered(tracking_uri)) is not None:
        raise ValueError(f"runs={experiment!r}: MLflow at {redact(tracking_uri)} does not answer ({reason})")
    client = MlflowClient(tracking_uri=tracking_uri)
    try:
        found = client.get_experiment_by_name(experiment)
        if found is None:
            raise ValueError(f"runs={experiment!r} {run_root_state(experiment)}, and no MLflow experiment of that "
                             f"name is at {redact(tracking_uri)}")
        parents = client.search_runs([found.experiment_id], f"tags.`{SWEEP_KIND_TAG}` = 'sweep'", max_results=1000)
    except MlflowException as exc:
        raise ValueError(f"runs={experiment!r}: MLflow at {redact(tracking_uri)} cannot be read "
                         f"({redact(str(exc).splitlines()[0] if str(exc) else type(exc).__name__)})") from None
    roots: list[Path] = []
    for run in parents:
        for dataset_input in run.inputs.dataset_inputs if run.inputs else []:
            results = Path(unquote(urlparse(dataset_input.dataset.source).path))
            if results.name == RESULTS and results.parent not in roots:
                roots.append(results.parent)
    if not roots and tracking_uri.startswith("sqlite:///"):  # sweeps stopped before logging their dataset
        roots.append(Path(tracking_uri.removeprefix("sqlite:///")).parent)
    return roots, {run.data.tags[SWEEP_ID_TAG] for run in parents if SWEEP_ID_TAG in run.data.tags}


def sweep_parent_runs(tracking_uri: str, sweep_ids: list[str]) -> list[str]:
    """The MLflow parent run ids of ``sweep_ids`` in the store at ``tracking_uri`` (none where it has none)."""
    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri=tracking_uri)
    experiments = [e.experiment_id for e in client.search_experiments()]
    found = []
    for sweep_id in sweep_ids:
        runs = client.search_runs(experiments, f"tags.`{SWEEP_KIND_TAG}` = 'sweep' and "
                                               f"tags.`{SWEEP_ID_TAG}` = '{sweep_id}'", max_results=1)
        found += [run.info.run_id for run in runs]
    return found


def with_derived_columns(frame: pd.DataFrame) -> pd.DataFrame:
    """A frame of result rows made elsewhere than ``load`` (which reads them upgraded) in today's fields: ``seq_k``
    from the length run, a model preset's ``generator``, the ``reorderer`` of rows written before cells recorded
    them (``dataset.upgrade_frame``, the one owner of that upgrade)."""
    return dataset.upgrade_frame(frame)
