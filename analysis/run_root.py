"""What a run root is, read without pandas, pyarrow or the library: a command checks a ``--run-root`` it is given
before it imports what reading one needs, so a wrong path answers at once."""

from __future__ import annotations

from pathlib import Path

DEFAULT_RUN_ROOT = Path("wavealign-runs")


def run_root_state(path: str | Path) -> str:
    """Why ``path`` is not a run root, in words that name its real state."""
    path = Path(path)
    if not path.exists():
        return "is no such folder"
    if not path.is_dir():
        return "is a file, not a folder"
    return (f"has no results yet (no results/, mlflow.db or sweeps/ in it); a sweep writes them: "
            f"wavealign sweep run_root={path}")


def is_run_root(path: str | Path) -> bool:
    """A folder a sweep wrote to: it holds ``results/``, ``mlflow.db`` or ``sweeps/``."""
    path = Path(path)
    return path.is_dir() and any((path / name).exists() for name in ("results", "mlflow.db", "sweeps"))
