"""The sweep orchestrator: Hydra configs (``config``) -> cells (``grid``) -> Ray workers by GPU type
(``cluster``, ``sweep``) -> Parquet (``dataset``) and MLflow (``tracking``), with a live view (``progress``).

It depends on the ``wavealign`` library, never the other way round. Entry points: ``wavealign sweep`` and
``wavealign sync-mlflow`` (``jobs/sweep.py``, ``jobs/sync_mlflow.py``).
"""
