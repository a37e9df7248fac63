"""Adding a GPU type is one entry in ``wavealign/hardware.py`` plus one ``ctas_per_sm`` line in each backend that
runs on it: proven on a copy of the checkout, where a sweep then validates, expands and simulates cells for it."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
ENTRY = """    Hardware(name="x100", display_name="A GPU of the test", ray_accelerator_type="X100",
             compute_capability=(9, 0), sm_count=100, l2_bytes=40 * MiB, hbm_bytes_per_s=3.0e12,
             peak_bf16_flops=800e12, default_block_size=128, default_backend="triton", l2_partitions=2),
"""
PROBE = """
import json
from wavealign import kernels, pipeline
from orchestrator import config, grid

cfg = config.load(["~sweep", "grid.hardware=[x100]", "grid.backend=[fa4,triton,flex,flashinfer]",
                   "grid.measure=[simulated]", "grid.method=[planted]", "grid.workload=[shape-2h]", "grid.seq_k=[4]",
                   "grid.variant=[original,wavealign]"])
cells = grid.expand(cfg).cells
results = pipeline.run_group([c for c in cells if c.attention.backend == "triton"])
print(json.dumps({"waves": {c.attention.backend: c.attention.geometry.wave_size for c in cells},
                  "block_sizes": sorted({c.attention.geometry.block_size for c in cells}),
                  "status": [r.status for r in results],
                  "errors": [r.error for r in results],
                  "l2_hit_pct": [r.l2_hit_pct for r in results]}))
"""


def test_a_gpu_type_is_one_hardware_entry_plus_each_backend_s_occupancy_line(tmp_path):
    checkout = tmp_path / "checkout"
    for folder in ("wavealign", "orchestrator", "jobs", "analysis", "conf"):
        shutil.copytree(REPO / folder, checkout / folder, ignore=shutil.ignore_patterns("__pycache__"))
    hardware = checkout / "wavealign" / "hardware.py"
    hardware.write_text(hardware.read_text().replace("_ENTRIES = (\n", "_ENTRIES = (\n" + ENTRY, 1))
    edited = []
    for module in sorted((checkout / "wavealign" / "kernels").glob("*.py")):
        text, count = re.subn(r"ctas_per_sm=\{", 'ctas_per_sm={"x100": 1, ', module.read_text())
        if count:
            module.write_text(text)
            edited.append(module.stem)
    assert edited == ["fa4", "flashinfer", "flex", "triton_blocksparse"]  # one line each; the others run anywhere
    env = {**os.environ, "PYTHONPATH": str(checkout)}
    env.pop("WAVEALIGN_PLUGINS", None)
    done = subprocess.run([sys.executable, "-c", PROBE], cwd=tmp_path, env=env, capture_output=True, text=True,
                          timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    found = json.loads(done.stdout.strip().splitlines()[-1])
    # the wave is the new GPU's SMs x each backend's CTAs per SM; the block size its default
    assert found["waves"] == {"fa4": 100, "triton": 100, "flex": 100, "flashinfer": 100}
    assert found["block_sizes"] == [128]
    assert found["status"] == ["done", "done"], found["errors"]
    assert all(0 <= hit <= 100 for hit in found["l2_hit_pct"])
