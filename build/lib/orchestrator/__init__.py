"""The sweep orchestrator: Hydra configs (``config``) -> cells (``grid``) -> what to run (``plan``) -> Ray workers
by GPU type (``cluster``, ``dispatch``) -> Parquet (``dataset``) then MLflow (``tracking``) as rows are recorded
(``record``), with a live view (``progress``) and a final ``summary``; ``sweep.run`` ties them together.

It depends on the ``wavealign`` library, never the other way round. Entry points: ``wavealign sweep`` and
``wavealign sync-mlflow`` (``jobs/sweep.py``, ``jobs/sync_mlflow.py``).
"""
