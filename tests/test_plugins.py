"""A backend or a mask method is one module plus one YAML: a user's own, kept outside the repository, run in a
sweep by naming it (``plugins``, ``conf_dirs``), with no other change. And the library stays light."""

from __future__ import annotations

import os
import shlex
import subprocess
import sys
import textwrap
from pathlib import Path

import pyarrow.dataset as ds

from wavealign.orchestrator import dataset

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


def _write(folder: Path) -> None:
    (folder / "toy_backend.py").write_text(TOY_BACKEND)
    (folder / "toy_band.py").write_text(TOY_METHOD)
    for group, name, params in (("backend", "toy-mean", "scale: 1.0"), ("method", "toy-band", "width: 1")):
        (folder / "conf" / group).mkdir(parents=True)
        (folder / "conf" / group / f"{name}.yaml").write_text(
            f"# @package {group}\nname: {name}\nparams:\n  {params}\n")


def test_a_plugin_backend_and_method_run_in_a_sweep_from_one_module_and_one_yaml_each(tmp_path):
    plugins = tmp_path / "plugins"
    plugins.mkdir()
    _write(plugins)
    runs = tmp_path / "runs"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(plugins), str(REPO)])}
    env.pop("WAVEALIGN_PLUGINS", None)
    overrides = ["~sweep", "grid.hardware=[cpu]", "grid.backend=[toy-mean]", "grid.method=[toy-band]",
                 "grid.workload=[shape-2h]", "grid.seq_k=[1.024]", "grid.variant=[original,wavealign]",
                 "+grid.method_params.toy-band.width=[2]", "grid.reps=1", "grid.warmup=0", "progress=false",
                 "plugins=[toy_backend,toy_band]", f"conf_dirs=[{plugins / 'conf'}]", "mlflow.enabled=false",
                 "ray.num_cpus=2", f"run_root={runs}"]
    done = subprocess.run([sys.executable, "-m", "wavealign.jobs.cli", "sweep", *overrides], cwd=REPO, env=env,
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    rows = dataset.read(runs, filter=ds.field("backend") == "toy-mean").to_pylist()
    assert sorted(r["variant"] for r in rows) == ["original", "wavealign"]
    assert all(r["status"] == "done" and r["method"] == "toy-band" and r["timer"] == "wall_clock" for r in rows)
    # 8 blocks of 128, band of width 2: (8 * 5 - 2 * (2 + 1)) / 64 of the blocks
    assert all(abs(r["density"] - 34 / 64) < 1e-9 for r in rows)

    # a row's repro command re-runs just its cell (its group's original re-timed beside it, not recorded again)
    aligned = next(r for r in rows if r["variant"] == "wavealign")
    command = shlex.split(aligned["repro_command"])
    assert command[:2] == ["wavealign", "sweep"] and f"only_cells=[{aligned['cell_id']}]" in command
    again = subprocess.run([sys.executable, "-m", "wavealign.jobs.cli", *command[1:]], cwd=REPO, env=env,
                           capture_output=True, text=True, timeout=600)
    assert again.returncode == 0, again.stdout[-3000:] + again.stderr[-3000:]
    rerun = dataset.read(runs, filter=ds.field("backend") == "toy-mean").to_pylist()
    assert sorted(r["cell_id"] for r in rerun) == sorted([r["cell_id"] for r in rows] + [aligned["cell_id"]])


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
