"""WaveAlign: wave-aligned query-row reordering for dynamic block-sparse attention.

Submodules follow the data flow: ``workloads -> masks -> skip -> reorder -> kernels -> measure``.
Import what you need, e.g. ``from wavealign import reorder``.

The sweep machinery lives under this name too: ``wavealign.orchestrator``, ``wavealign.jobs`` (the ``wavealign``
commands) and ``wavealign.analysis``, with the sweep's Hydra configs in ``conf_dir()``.
"""

from pathlib import Path

__version__ = "0.1.0"

_PACKAGE_DIR = Path(__file__).resolve().parent
# The repository keeps the sweep's packages and configs beside this package (orchestrator/, jobs/, analysis/, conf/);
# a wheel installs them inside it (pyproject.toml's package-dir), so that it adds no generic top-level names.
SWEEP_PARTS = ("orchestrator", "jobs", "analysis", "conf")


def _checkout() -> Path | None:
    """The repository root this package is imported from (PYTHONPATH, an editable install, a Ray ``working_dir``),
    or None when it is installed from a wheel."""
    root = _PACKAGE_DIR.parent
    found = (root / "orchestrator" / "__init__.py").is_file() and (root / "conf" / "config.yaml").is_file()
    return root if found else None


CHECKOUT = _checkout()
if CHECKOUT is not None:
    # A checkout's orchestrator/, jobs/ and analysis/ import as wavealign.orchestrator, ... exactly as in a wheel:
    # one name per module, so no registry is filled twice and Ray workers unpickle functions by the same name
    # wherever the code came from. Never import them by their bare folder names.
    __path__.append(str(CHECKOUT))


def conf_dir() -> Path:
    """The sweep's Hydra config directory: the checkout's ``conf/``, or the copy a wheel installs as
    ``wavealign/conf``."""
    return (CHECKOUT or _PACKAGE_DIR) / "conf"
