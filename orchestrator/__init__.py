"""The sweep orchestrator: Hydra configs (``config``) -> cells (``grid``) -> what to run (``plan``) -> Ray workers
by GPU type (``cluster``, ``dispatch``) -> Parquet (``dataset``) then MLflow (``tracking``) as rows are recorded
(``record``), with a live view (``progress``) and a final ``summary``; ``sweep.run`` ties them together.

Beside the flow, what keeps a run root whole: every file written whole and 0640, every folder 0750, no link
followed (``files``), credentials out of what is recorded or printed (``redact``), the sqlite MLflow store made
whole and following its run root (``sqlite_store``), a tracking server that does not answer said in seconds
(``mlflow_server``), one way to stop on a signal (``stop``), an embedded Ray stopped with a killed driver
(``watchdog``) or kept in a network namespace of its own (``netns``), one driver per run root (``lock``).

It depends on the ``wavealign`` library, never the other way round. Entry points: ``wavealign sweep`` and
``wavealign sync-mlflow`` (``jobs/sweep.py``, ``jobs/sync_mlflow.py``).
"""
