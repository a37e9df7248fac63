"""A test-only plugin: measurer ``test-count``, which runs a cell's launch ``launches`` times on the wall clock,
a parameter declared once here with its default and its check.

A sweep runs it as ``plugins=[counting_measurer]`` with this folder on ``PYTHONPATH``; listing
``grid.measure_params.test-count.launches: [1, 3]`` makes it a sweep axis. ``tests/test_plugins.py`` shows the axis
doubling the cells and each value reaching the measurement.
"""

import statistics
import time

from wavealign import measurers
from wavealign.blockmask import check_int
from wavealign.measurers import Measurement


def measure(m: Measurement) -> None:
    """The launch run ``launches`` times, each timed on the wall clock."""
    launches = MEASURER.resolve(m.cell.measurer.measure_params)["launches"]
    launch = m.step.launch(m.prepared.mask, m.prepared.order, m.shape)
    times = []
    for _ in range(launches):
        start = time.perf_counter()
        launch.run(*m.qkv)
        times.append((time.perf_counter() - start) * 1e3)
    m.result.device, m.result.timer, m.result.reps_done = "cpu", "wall_clock", launches
    m.result.kernel_ms_reps, m.result.kernel_ms_median = times, statistics.median(times)


MEASURER = measurers.register(measurers.Measurer(
    name="test-count", measure=measure, description="the launch run `launches` times on the wall clock (a test)",
    params={"launches": 1}, checks={"launches": lambda name, value: check_int(name, value, lo=1, hi=10)},
    runs=lambda spec: spec.measure_params.get("launches", 1)))
