"""A backend, a mask method, a reorderer or a measurer is one module: a user's own, kept outside the repository,
run in a sweep by naming it (``plugins``), with no other change; its parameters, their defaults and types are its
module's, and the sweep's schema for them follows. And the library stays light."""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
import textwrap
from pathlib import Path

import pyarrow.dataset as ds

from orchestrator import dataset

REPO = Path(__file__).resolve().parent.parent

TOY_BACKEND = '''
"""Backend toy-mean: every query row gets the mean of V over the blocks its mask row selects."""
from dataclasses import dataclass

import torch

from wavealign.kernels import ALL_HARDWARE, Backend, register


@dataclass(frozen=True)
class MeanLaunch:
    mask: torch.Tensor
    block_size: int
    scale: float

    def run(self, q, k, v):
        blocks = v.unflatten(2, (-1, self.block_size)).mean(3)            # (B, H, NB, D)
        rows = self.mask.float() @ blocks[0] / self.mask.sum(-1, keepdim=True).clamp(min=1)
        return (self.scale * rows).repeat_interleave(self.block_size, dim=1)[:, : q.shape[2]].unsqueeze(0)


def plan(mask, order, shape, scale=1.0):
    return MeanLaunch(mask, shape.block_size, scale)


register(Backend(name="toy-mean", plan=plan, description="block means of V (a plugin test)",
                 ctas_per_sm=ALL_HARDWARE, needs_gpu=False))
'''

TOY_METHOD = '''
"""Method toy-band: each query block keeps the K/V blocks within ``width`` of its own index."""
import torch

from wavealign import masks


def band(heads, q_blocks, kv_blocks, *, width=1, device="cpu"):
    rows, cols = torch.arange(q_blocks).unsqueeze(1), torch.arange(kv_blocks).unsqueeze(0)
    return ((rows - cols).abs() <= width).expand(heads, q_blocks, kv_blocks).to(device)


masks.register("toy-band", None, {"width": 1}, "a diagonal band (a plugin test)", from_shape=band)
'''

TOY_REORDERER = '''
"""Reorderer toy-reverse: each head's rows in reverse order."""
import torch

from wavealign import reorderers


def group(mask, *, wave_size, seed):
    return torch.arange(mask.shape[1] - 1, -1, -1, device=mask.device).expand(mask.shape[0], -1)


reorderers.register("toy-reverse", group, {}, "rows in reverse order (a plugin test)", reference="none")
'''

TOY_MEASURER = '''
"""Measurer toy-once: the launch planned, then run once, timed by the host's wall clock."""
import time

from wavealign import measurers


def measure(m):
    launch = m.step.launch(m.prepared.mask, m.prepared.order, m.shape)
    start = time.perf_counter()
    launch.run(*m.qkv)
    m.result.kernel_ms_median = (time.perf_counter() - start) * 1e3
    m.result.device, m.result.timer, m.result.reps_done = "cpu", "once", 1


measurers.register(measurers.Measurer(name="toy-once", measure=measure, description="one call (a plugin test)"))
'''
PLUGINS = {"toy_backend": ("backend", "toy-mean", TOY_BACKEND), "toy_band": ("method", "toy-band", TOY_METHOD),
           "toy_reverse": ("reorderer", "toy-reverse", TOY_REORDERER),
           "toy_once": ("measure", "toy-once", TOY_MEASURER)}


def _write(folder: Path) -> None:
    """Each plugin: its module alone (its name, parameters and defaults are what it registers)."""
    for module, (_, _, source) in PLUGINS.items():
        (folder / f"{module}.py").write_text(source)


def test_a_plugin_backend_method_reorderer_and_measurer_run_in_a_sweep_from_one_module_each(tmp_path):
    plugins = tmp_path / "plugins"
    plugins.mkdir()
    _write(plugins)
    runs = tmp_path / "runs"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(plugins), str(REPO)])}
    env.pop("WAVEALIGN_PLUGINS", None)
    overrides = ["~sweep", "grid.hardware=[cpu]", "grid.backend=[toy-mean]", "grid.method=[toy-band]",
                 "grid.workload=[shape-2h]", "grid.seq_k=[1.024]", "grid.variant=[original,wavealign]",
                 "grid.reorderer=[toy-reverse]", "grid.measure=[timed,toy-once]",
                 "+grid.method_params.toy-band.width=[2]", "grid.reps=1", "grid.warmup=0", "progress=false",
                 f"plugins=[{','.join(PLUGINS)}]", "mlflow.enabled=false",
                 "ray.num_cpus=2", f"run_root={runs}"]
    done = subprocess.run([sys.executable, "-m", "jobs.cli", "sweep", *overrides], cwd=REPO, env=env,
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    every = dataset.read(runs, filter=ds.field("backend") == "toy-mean").to_pylist()
    assert all(r["status"] == "done" and r["method"] == "toy-band" for r in every)
    # 8 blocks of 128, band of width 2: (8 * 5 - 2 * (2 + 1)) / 64 of the blocks
    assert all(abs(r["density"] - 34 / 64) < 1e-9 for r in every)
    assert {(r["variant"], r["reorderer"]) for r in every} == {("original", "identity"), ("wavealign", "toy-reverse")}
    once = [r for r in every if r["measure"] == "toy-once"]
    assert len(once) == 2 and all(r["timer"] == "once" and r["kernel_ms_median"] > 0 for r in once)
    rows = [r for r in every if r["measure"] == "timed"]
    assert sorted(r["variant"] for r in rows) == ["original", "wavealign"]
    assert all(r["timer"] == "wall_clock" for r in rows)

    # a row's repro command re-runs just its cell (its group's original re-timed beside it, not recorded again)
    aligned = next(r for r in rows if r["variant"] == "wavealign")
    command = shlex.split(aligned["repro_command"])
    assert command[:2] == ["wavealign", "sweep"] and f"only_cells=[{aligned['cell_id']}]" in command
    again = subprocess.run([sys.executable, "-m", "jobs.cli", *command[1:]], cwd=REPO, env=env,
                           capture_output=True, text=True, timeout=600)
    assert again.returncode == 0, again.stdout[-3000:] + again.stderr[-3000:]
    rerun = dataset.read(runs, filter=ds.field("backend") == "toy-mean").to_pylist()
    assert sorted(r["cell_id"] for r in rerun) == sorted([r["cell_id"] for r in every] + [aligned["cell_id"]])


NEW_PARAMETER = """
import json

from orchestrator import config, grid

base = ["~sweep", "grid.hardware=[cpu]", "grid.backend=[reference]", "grid.method=[test-stripes]",
        "grid.workload=[shape-2h]", "grid.seq_k=[1]", "grid.variant=[original]", "plugins=[striped_method]"]
found = {"default": [c.flat()["method_params"] for c in grid.expand(config.load(base)).cells],
         "axis": [c.flat()["method_params"] for c in grid.expand(config.load(
             [*base, "+grid.method_params.test-stripes.period=[3,5]"])).cells]}
for bad in ("period=wide", "period=[4,0]", "periods=[2]"):
    try:
        config.load([*base, f"+grid.method_params.test-stripes.{bad}"])
    except config.ConfigError as refused:
        found[bad] = str(refused)
print(json.dumps(found))
"""


def _with_test_plugins(code: str) -> dict:
    """What ``code`` prints last (JSON), run in a process of its own with ``tests/plugins`` importable: the registries
    keep what a plugin gives them."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO / "tests" / "plugins"), str(REPO)])}
    env.pop("WAVEALIGN_PLUGINS", None)
    done = subprocess.run([sys.executable, "-c", code], cwd=REPO, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_a_new_method_parameter_is_one_plugin_module_and_the_sweep_s_schema_follows():
    """Adding a method parameter touched 1 file: ``tests/plugins/striped_method.py`` declares ``period``, its
    default and its check, in the one ``masks.register`` call of its method. Its axis, its cells and the schema that
    refuses a value of another type (read from the default by ``registry.param_types``, naming the entry) follow, with
    no YAML, config, schema or orchestrator edit. (Run in a process of its own: the registry keeps what it is given.)"""
    found = _with_test_plugins(NEW_PARAMETER)
    assert found["default"] == [{"period": 2}]
    assert found["axis"] == [{"period": 3}, {"period": 5}]
    assert found["period=wide"] == "grid.method_params.test-stripes.period: expected an integer, got 'wide'"
    assert found["period=[4,0]"] == "grid.method_params.test-stripes.period has 0: period must be >= 1, got 0"
    assert found["periods=[2]"] == ("grid.method_params.test-stripes.periods=[2] is not a parameter of method "
                                    "'test-stripes'; expected one of ['period']; did you mean period?")


NEW_AXIS = """
import json

from wavealign import pipeline
from orchestrator import config, grid

cells = grid.expand(config.load([
    "~sweep", "grid.hardware=[cpu]", "grid.backend=[reference]", "grid.method=[planted]", "grid.workload=[shape-2h]",
    "grid.seq_k=[1]", "grid.variant=[original]", "grid.measure=[test-count]", "plugins=[counting_measurer]",
    "+grid.measure_params.test-count.launches=[1,3]"])).cells
results = [r for c in cells for r in pipeline.run_group([c])]
print(json.dumps({"launches": [c.measurer.measure_params["launches"] for c in cells],
                  "reps_done": [r.reps_done for r in results], "status": [r.status for r in results]}))
"""


def test_a_new_sweep_axis_is_one_plugin_module():
    """Adding a sweep axis touched 1 file: ``tests/plugins/counting_measurer.py`` registers measurer ``test-count``
    with its parameter ``launches``; listing two values of it in the grid doubles the cells, and each cell's value
    reaches its measurement, with no config, schema, grid or record edit."""
    found = _with_test_plugins(NEW_AXIS)
    assert sorted(found["launches"]) == [1, 3] and found["status"] == ["done", "done"]
    assert found["reps_done"] == found["launches"]


def test_importing_the_library_loads_no_orchestration_or_dataframe_package():
    code = textwrap.dedent("""
        import sys
        import wavealign.pipeline
        from wavealign import kernels, masks
        kernels.names(), masks.available()
        heavy = sorted({m.split(".")[0] for m in sys.modules} & {"ray", "hydra", "mlflow", "pyarrow", "pandas",
                                                               "omegaconf"})
        print(",".join(heavy))
    """)
    done = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == ""
