"""Deprecated: the old name of ``wavealign.launch_order`` (renamed in 0.1.0), kept for one release.

Importing it warns (a ``DeprecationWarning`` naming ``wavealign.launch_order``) and gives ``wavealign.launch_order``
itself, its submodules (``plan_graphs``, ``block_gather``) under the old name too, so code written against the
previous README keeps running, the same objects (``RowOrder``, ``plan``) and no second copy of any module, until it
is moved to the new name.
"""

import sys
import warnings

from wavealign import launch_order

warnings.warn("wavealign.reorder is renamed wavealign.launch_order: import that instead (this alias goes in the next "
              "release)", DeprecationWarning, stacklevel=2)
for _submodule in ("block_gather", "plan_graphs"):
    sys.modules[f"{__name__}.{_submodule}"] = getattr(launch_order, _submodule)
# the import statement hands out what sys.modules holds under the name once this module has run
sys.modules[__name__] = launch_order
