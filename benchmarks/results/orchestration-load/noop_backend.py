"""Backend ``noop``: a launch that returns V as it is, at once: the load benchmark's cell, so that what is timed is
the sweep's own machinery (grid, Ray dispatch, recording), not attention.

A plugin (``plugins=[noop_backend]`` with ``conf_dirs=[<this folder>/conf]``): one module and one YAML, registered
like any backend, kept here and not in the library, where it would measure nothing.
"""

from dataclasses import dataclass

from wavealign.kernels import ALL_HARDWARE, Backend, register


@dataclass(frozen=True)
class NoopLaunch:
    def run(self, q, k, v):
        return v


def plan(mask, order, shape):
    return NoopLaunch()


register(Backend(name="noop", plan=plan, description="returns V at once (the orchestration load benchmark)",
                 ctas_per_sm=ALL_HARDWARE, needs_gpu=False))
