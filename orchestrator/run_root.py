"""A run root's layout, the folder a sweep writes to, named once: ``results/`` (the Parquet dataset), ``sweeps/<id>``
(each sweep's config, run records and summary), ``mlflow.db`` (the local MLflow store), ``mlartifacts/`` (its
artifacts) and ``.lock`` (the driver holding it). Read without pandas, pyarrow, MLflow or the library, so a command
checks a ``--run-root`` it is given before it imports what reading one needs, and a wrong path answers at once.

    root = RunRoot("wavealign-runs")
    root.results, root.sweep(sweep_id), root.store, root.tracking_uri
    root.is_run_root()   # False: root.state() says why, in words
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

DEFAULT_RUN_ROOT = Path("wavealign-runs")
RESULTS = "results"
SWEEPS = "sweeps"
STORE = "mlflow.db"
ARTIFACTS = "mlartifacts"
LOCK = ".lock"
# the folders a sweep writes in it (MLflow's artifacts: those of a store of its own), each checked before any work:
# writable, and not a link planted to send what it holds elsewhere
WRITTEN_FOLDERS = (RESULTS, SWEEPS, ARTIFACTS)


@dataclass(frozen=True)
class RunRoot:
    """The run root at ``path``: where each of its parts lives."""

    path: Path

    def __post_init__(self) -> None:
        object.__setattr__(self, "path", Path(self.path))

    @property
    def results(self) -> Path:
        """The Parquet dataset, partitioned by hardware and method."""
        return self.path / RESULTS

    @property
    def sweeps(self) -> Path:
        """One folder per sweep id (``sweep``)."""
        return self.path / SWEEPS

    def sweep(self, sweep_id: str) -> Path:
        """A sweep's folder: its config, run records and summary (the caller checks the id's format)."""
        return self.sweeps / sweep_id

    @property
    def store(self) -> Path:
        """The local sqlite MLflow store."""
        return self.path / STORE

    @property
    def tracking_uri(self) -> str:
        """MLflow's URI of ``store``, absolute: the default store of a sweep in this run root."""
        return f"sqlite:///{self.store.resolve()}"

    @property
    def artifacts(self) -> Path:
        """Where the local store keeps its runs' artifacts."""
        return self.path / ARTIFACTS

    @property
    def artifact_uri(self) -> str:
        """``artifacts`` as the file URI MLflow records for an experiment made in this run root."""
        return self.artifacts.resolve().as_uri()

    @property
    def lock(self) -> Path:
        """The file naming the driver that holds the run root (``orchestrator.lock``)."""
        return self.path / LOCK

    def is_run_root(self) -> bool:
        """A folder a sweep wrote to: it holds ``results/``, ``mlflow.db`` or ``sweeps/``."""
        return self.path.is_dir() and any(p.exists() for p in (self.results, self.store, self.sweeps))

    def state(self) -> str:
        """Why it is not a run root, in words that name its real state."""
        if not self.path.exists():
            return "is no such folder"
        if not self.path.is_dir():
            return "is a file, not a folder"
        return (f"has no results yet (no {RESULTS}/, {STORE} or {SWEEPS}/ in it); a sweep writes them: "
                f"wavealign sweep run_root={self.path}")


def is_run_root(path: str | Path) -> bool:
    """``RunRoot(path).is_run_root()``: for a path given as text."""
    return RunRoot(Path(path)).is_run_root()


def run_root_state(path: str | Path) -> str:
    """``RunRoot(path).state()``: for a path given as text."""
    return RunRoot(Path(path)).state()
