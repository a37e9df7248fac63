"""The import contract: the library (``wavealign/``) imports neither the sweep's packages (``orchestrator``,
``analysis``, ``jobs``) nor what they bring (Ray, Hydra and OmegaConf, MLflow), so that ``pip install wavealign``
without extras is a library a model can use. Read from the source (every import statement, at any depth), not by
importing it, by ``docs/structure/import_reader.py``, the reader of the layout's counts. The sweep's packages are the
top-level packages ``pyproject.toml`` lists beside ``wavealign``, the one place that names them. The deprecated
aliases of their old names (``wavealign._renamed``) load them by name, only when those old names are imported."""

from __future__ import annotations

import tomllib
from pathlib import Path

from checkout_imports import import_reader

REPO = Path(__file__).resolve().parent.parent
PACKAGES = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"]
SWEEP_PACKAGES = tuple(sorted({name.split(".")[0] for name in PACKAGES} - {"wavealign"}))
# and their deprecated old names (wavealign.analysis, ...), which are the same modules
FORBIDDEN = (*SWEEP_PACKAGES, *(f"wavealign.{name}" for name in SWEEP_PACKAGES), "ray", "hydra", "omegaconf", "mlflow")


def forbidden(name: str) -> bool:
    return any(name == f or name.startswith(f"{f}.") for f in FORBIDDEN)


def test_the_library_imports_no_sweep_package_ray_hydra_omegaconf_or_mlflow():
    assert SWEEP_PACKAGES == ("analysis", "jobs", "orchestrator")
    broken = []
    for path in sorted((REPO / "wavealign").rglob("*.py")):
        where = path.relative_to(REPO)
        found = import_reader.imports(path.read_text(), ".".join(where.parent.parts))
        broken += [f"{where}:{line} imports {name}" for line, name in found if forbidden(name)]
    assert broken == []


def test_the_contract_reads_every_kind_of_import():
    source = ("import ray.util\nfrom orchestrator import join\nimport analysis.load\n"
              "from jobs import cli\ndef f():\n    import hydra\n    from omegaconf import DictConfig\n"
              "    from mlflow import log_metric\n    from wavealign import analysis\n")
    assert [(line, forbidden(name)) for line, name in import_reader.imports(source, "wavealign.skip")] == [
        (1, True), (2, True), (3, True), (4, True), (6, True), (7, True), (8, True), (9, True)]
    assert import_reader.imports("from . import policy\nfrom .. import masks\n", "wavealign.skip") == [
        (1, "wavealign.skip.policy"), (2, "wavealign.masks")]
    assert not any(map(forbidden, ["orchestration", "rayon", "mlflow_like", "wavealign.analysis_of", "jobsite"]))

