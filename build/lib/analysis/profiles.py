"""Skip profiles in the MLflow model registry: register a fitted profile as ``wavealign-skip-<hardware>``
with an alias, and fetch registered profiles back to files the runtime reads.

The model is artifact-backed: a model version's source is the fit run's ``profile/`` folder holding
``<hardware>.yaml``. ``wavealign.skip`` never imports MLflow; ``materialise`` downloads
``models:/wavealign-skip-<hw>@<alias>`` into a folder, and pointing ``WAVEALIGN_PROFILE_DIR`` at that
folder makes the runtime (and the sweep's workers, which inherit it) use the registered profiles.
"""

from __future__ import annotations

import logging
import shutil
import tempfile
from pathlib import Path

from wavealign import hardware as hardware_registry
from wavealign import skip

logger = logging.getLogger(__name__)
MODEL_PREFIX = "wavealign-skip-"
PROFILE_ARTIFACT_DIR = "profile"
DEFAULT_ALIAS = "current"


def model_name(hardware: str) -> str:
    return f"{MODEL_PREFIX}{hardware_registry.get(hardware).name}"


def next_version(client, hardware: str) -> int:
    """The version number the registry will give the next model version of ``hardware``."""
    name = model_name(hardware)
    versions = client.search_model_versions(f"name = '{name}'")
    return 1 + max((int(v.version) for v in versions), default=0)


def register(client, run_id: str, hardware: str, alias: str = DEFAULT_ALIAS) -> int:
    """Register the run's ``profile/`` artifact folder as a new version of ``wavealign-skip-<hw>`` and
    point ``alias`` at it; returns the version number."""
    from mlflow.exceptions import MlflowException

    name = model_name(hardware)
    try:
        client.get_registered_model(name)
    except MlflowException:
        client.create_registered_model(name, description=f"WaveAlign adaptive-skip profile for {hardware} "
                                                         f"(wavealign.skip.Profile YAML)")
    source = f"{client.get_run(run_id).info.artifact_uri}/{PROFILE_ARTIFACT_DIR}"
    version = client.create_model_version(name, source=source, run_id=run_id,
                                          tags={"wavealign.hardware": hardware})
    client.set_registered_model_alias(name, alias, version.version)
    return int(version.version)


def fetch(hardware: str, tracking_uri: str, alias: str = DEFAULT_ALIAS, dst_dir: str | Path | None = None,
          registry_uri: str | None = None) -> Path:
    """Download ``models:/wavealign-skip-<hw>@<alias>`` and return the path of its profile YAML."""
    import mlflow.artifacts
    from mlflow.tracking import MlflowClient

    name = model_name(hardware)
    client = MlflowClient(tracking_uri=tracking_uri, registry_uri=registry_uri or tracking_uri)
    version = client.get_model_version_by_alias(name, alias)
    target = Path(dst_dir or tempfile.mkdtemp(prefix=f"{name}-"))
    target.mkdir(parents=True, exist_ok=True)
    local = Path(mlflow.artifacts.download_artifacts(artifact_uri=version.source, dst_path=str(target),
                                                     tracking_uri=tracking_uri))
    path = local / f"{hardware_registry.get(hardware).name}.yaml"
    if not path.is_file():
        raise ValueError(f"registered model {name}@{alias} (version {version.version}) has no {path.name} in "
                         f"its source {version.source}")
    skip.Profile.load(path)  # refuse a malformed profile here, not in a worker mid-sweep
    return path


def materialise(dst_dir: str | Path, tracking_uri: str, alias: str = DEFAULT_ALIAS) -> dict[str, str]:
    """Fill ``dst_dir`` with one profile per hardware id: the registered ``@alias`` version where one
    exists, else the packaged (e.g. provisional) profile. Returns hardware -> where its profile came from.
    Set ``WAVEALIGN_PROFILE_DIR=dst_dir`` for the runtime to use them."""
    from mlflow.exceptions import MlflowException

    dst = Path(dst_dir)
    dst.mkdir(parents=True, exist_ok=True)
    sources = {}
    for hardware in hardware_registry.names():
        target = dst / f"{hardware}.yaml"
        try:
            with tempfile.TemporaryDirectory() as tmp:
                shutil.copyfile(fetch(hardware, tracking_uri, alias, tmp), target)
            sources[hardware] = f"models:/{model_name(hardware)}@{alias}"
        except (MlflowException, ValueError) as exc:
            packaged = skip.PROFILE_DIR / f"{hardware}.yaml"
            if packaged.is_file():
                shutil.copyfile(packaged, target)
                sources[hardware] = str(packaged)
                logger.info("no registered %s@%s (%s); using the packaged profile", model_name(hardware),
                            alias, str(exc).splitlines()[0] if str(exc) else type(exc).__name__)
    return sources
