"""WaveAlign: wave-aligned query-row reordering for dynamic block-sparse attention.

Submodules follow the data flow: ``workloads -> masks -> attention (skip -> reorder -> kernels) -> measurers``.
Import what you need, e.g. ``from wavealign import launch_order``.

The sweep machinery lives under this name too: ``wavealign.orchestrator``, ``wavealign.jobs`` (the ``wavealign``
commands) and ``wavealign.analysis``, with the sweep's Hydra configs in ``conf_dir()``.
"""

import importlib.abc
import importlib.machinery
import sys
from pathlib import Path

__version__ = "0.1.0"

_PACKAGE_DIR = Path(__file__).resolve().parent
# The repository keeps the sweep's packages and configs beside this package (orchestrator/, jobs/, analysis/, conf/);
# a wheel installs them inside it (pyproject.toml's package-dir), so that it adds no generic top-level names.
SWEEP_PARTS = ("orchestrator", "jobs", "analysis", "conf")
SWEEP_PACKAGES = SWEEP_PARTS[:3]  # the ones that hold code


def _checkout() -> Path | None:
    """The repository root this package is imported from (PYTHONPATH, an editable install, a Ray ``working_dir``),
    or None when it is installed from a wheel."""
    root = _PACKAGE_DIR.parent
    found = (root / "orchestrator" / "__init__.py").is_file() and (root / "conf" / "config.yaml").is_file()
    return root if found else None


class _SweepPackagesFinder(importlib.abc.MetaPathFinder):
    """Finds ``wavealign.orchestrator``, ``wavealign.jobs`` and ``wavealign.analysis`` in a checkout's top-level
    folders, exactly as a wheel names them: one name per module, so no registry is filled twice and Ray workers
    unpickle functions by the same name wherever the code came from. Those three names only: the checkout root is
    never a package path, so ``wavealign.tests`` or ``wavealign.wavealign`` (a second copy of the library) do not
    import. Their submodules are found the usual way, in the package's folder."""

    def __init__(self, root: Path) -> None:
        self.root = root

    def find_spec(self, fullname: str, path=None, target=None):
        package, _, name = fullname.rpartition(".")
        if package != __name__ or name not in SWEEP_PACKAGES:
            return None
        return importlib.machinery.PathFinder.find_spec(fullname, [str(self.root)])


CHECKOUT = _checkout()
if CHECKOUT is not None and not any(isinstance(f, _SweepPackagesFinder) for f in sys.meta_path):
    # first: an editable install of another checkout must not answer for this one's sweep packages. Never import
    # them by their bare folder names (tests/test_wheel.py checks it)
    sys.meta_path.insert(0, _SweepPackagesFinder(CHECKOUT))


def conf_dir() -> Path:
    """The sweep's Hydra config directory: the checkout's ``conf/``, or the copy a wheel installs as
    ``wavealign/conf``."""
    return (CHECKOUT or _PACKAGE_DIR) / "conf"
