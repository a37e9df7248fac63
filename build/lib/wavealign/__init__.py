"""WaveAlign: wave-aligned query-row reordering for dynamic block-sparse attention.

Submodules follow the data flow: ``workloads -> masks -> skip -> reorder -> kernels -> measure``.
Import what you need, e.g. ``from wavealign import reorder``.
"""

__version__ = "0.1.0"
