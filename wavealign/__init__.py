"""WaveAlign: wave-aligned query-row reordering for dynamic block-sparse attention.

Submodules follow the data flow: ``workloads -> masks -> attention (skip -> reorder -> kernels) -> measurers``.
Import what you need, e.g. ``from wavealign import launch_order``.

The sweep machinery is three packages beside this one, each named as its folder: ``orchestrator``, ``jobs`` (the
``wavealign`` commands) and ``analysis``; they import the library, never the other way round. The sweep's Hydra
configs are in ``conf_dir()``.
"""

from pathlib import Path

__version__ = "0.1.0"

_PACKAGE_DIR = Path(__file__).resolve().parent


def _checkout() -> Path | None:
    """The repository root this package is imported from (an editable install, PYTHONPATH, a Ray ``working_dir``),
    or None when it is installed from a wheel."""
    root = _PACKAGE_DIR.parent
    found = (root / "orchestrator" / "__init__.py").is_file() and (root / "conf" / "config.yaml").is_file()
    return root if found else None


CHECKOUT = _checkout()


def conf_dir() -> Path:
    """The sweep's Hydra config directory: the checkout's ``conf/``, or the copy a wheel installs as
    ``wavealign/conf`` (configs are data, not code: they have no import name)."""
    return (CHECKOUT or _PACKAGE_DIR) / "conf"
