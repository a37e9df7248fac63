"""``pip install wavealign`` without extras is the library a model needs: with every extra's package made
unimportable, the reorder, the kernels' registry, the masks, the skip policy and BlockSparseAttention still work,
and the sweep commands and the simulator say which extra they need."""

import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
# what the extras bring ([sim], [sweep], [baselines], [diffusers]) and what they pull in
EXTRAS_ONLY = ("numba", "scipy", "sklearn", "hydra", "omegaconf", "ray", "mlflow", "pyarrow", "pandas", "matplotlib",
               "rich", "mtkahypar", "diffusers")

ABSENT = f"""
import importlib.abc, sys
class Absent(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path, target=None):
        if name.split(".")[0] in {EXTRAS_ONLY!r}:
            raise ModuleNotFoundError(f"No module named {{name!r}}", name=name)
sys.meta_path.insert(0, Absent())
"""


def run(code: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", ABSENT + code], cwd=REPO, capture_output=True, text=True,
                          timeout=300)


def test_the_library_works_without_any_extra():
    done = run("""
import torch
from wavealign import kernels, masks, measurers, reorder, reorderers, skip, synthetic
from wavealign.integrations.attention import BlockSparseAttention

mask = synthetic.random_mask(2, 8, 8, 0.4, seed=0)
order = reorder.plan(mask, wave_size=4)
q, k, v = (torch.randn(1, 2, 8 * 16, 32) for _ in range(3))
out = kernels.get("reference").plan(mask, order, kernels.LaunchShape.of(q, k, 16)).run(q, k, v)
plain = kernels.get("reference").plan(mask, None, kernels.LaunchShape.of(q, k, 16)).run(q, k, v)
assert torch.equal(out, plain)
xa = masks.build("xattention", q, k, v, 16, threshold=0.9, stride=4)
decision = skip.SkipPolicy(skip.load_profile("h200")).decide(skip.features(mask, "h200", block_size=16, head_dim=32))
attend = BlockSparseAttention(method="xattention", backend="reference", reorder="always", hardware="h100",
                              block_size=16, method_params={"threshold": 0.9, "stride": 4})
assert attend(q, k, v).shape == q.shape
assert "lsh" in reorderers.names() and "simulated" in measurers.names()
print("library ok", decision.reorder)
""")
    assert done.returncode == 0, done.stderr
    assert "library ok" in done.stdout


def test_the_simulator_and_the_sweep_name_the_extra_they_need():
    done = run("""
import torch
from wavealign import sim, synthetic
mask = synthetic.random_mask(1, 8, 8, 0.4, seed=0)
try:
    sim.simulate(mask, None, hardware="h100", backend="fa4", head_dim=128, wave_size=4, block_size=128)
except ModuleNotFoundError as exc:
    print("sim:", exc)
from wavealign.jobs import cli
sys.exit(cli.main(["sweep", "--dry-run"]))
""")
    assert done.returncode == 2, done.stderr
    assert "pip install 'wavealign[sim]'" in done.stdout
    assert "wavealign sweep needs the sweep tools" in done.stderr and "pip install 'wavealign[sweep]'" in done.stderr
