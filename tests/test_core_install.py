"""``pip install wavealign`` without extras is the library a model needs: with every extra's package made
unimportable, the reorder, the kernels' registry, the masks, the skip policy and BlockSparseAttention still work,
and the sweep commands and the simulator say which extra they need, before any work. An extra brings what its
users import: ``[diffusers]`` is enough for diffusers' ``WanPipeline``, in an environment holding that extra only."""

import importlib.metadata
import importlib.util
import os
import subprocess
import sys
import time
import tomllib
from pathlib import Path

from packaging.requirements import Requirement

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
from wavealign import kernels, launch_order, masks, measurers, reorderers, skip
from wavealign.masks import synthetic
from wavealign.integrations.attention import BlockSparseAttention

mask = synthetic.random_mask(2, 8, 8, 0.4, seed=0)
order = launch_order.plan(mask, wave_size=4)
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
from wavealign import sim
from wavealign.masks import synthetic
mask = synthetic.random_mask(1, 8, 8, 0.4, seed=0)
try:
    sim.simulate(mask, None, hardware="h100", backend="fa4", head_dim=128, wave_size=4, block_size=128)
except ModuleNotFoundError as exc:
    print("sim:", exc)
from jobs import cli
sys.exit(cli.main(["sweep", "--dry-run"]))
""")
    assert done.returncode == 2, done.stderr
    assert "pip install 'wavealign[sim]'" in done.stdout
    assert done.stderr.startswith("wavealign sweep: needs the [sweep] extra")
    assert done.stderr.strip().endswith("pip install 'wavealign[sweep]'") and done.stderr.count("\n") == 1


def _refused_at_once(code: str, absent: tuple[str, ...]) -> subprocess.CompletedProcess:
    """Run ``code`` with the packages ``absent`` unimportable, as a library-only install would have them."""
    preamble = ABSENT.replace(repr(EXTRAS_ONLY), repr(absent))
    return subprocess.run([sys.executable, "-c", preamble + code], cwd=REPO, capture_output=True, text=True,
                          timeout=300)


def test_report_without_the_analysis_extra_names_it_in_one_line_and_writes_nothing(tmp_path):
    done = _refused_at_once(f"""
from jobs import cli
sys.exit(cli.main(["report", "--run-root", {str(tmp_path)!r}]))
""", ("pandas", "pyarrow", "matplotlib"))
    assert done.returncode == 2, done.stderr
    assert done.stderr.startswith("wavealign report: needs the [analysis] extra") and done.stderr.count("\n") == 1
    assert "pip install 'wavealign[analysis]'" in done.stderr and "Traceback" not in done.stderr
    assert list(tmp_path.iterdir()) == []


def _closure(requirements: list[str], extras: frozenset[str] = frozenset()) -> set[str]:
    """The distributions these requirements (markers evaluated for ``extras``) resolve to in this environment,
    with everything they require in turn."""
    found: set[str] = set()
    pending = [(Requirement(r), extras) for r in requirements]
    while pending:
        requirement, context = pending.pop()
        if requirement.marker is not None and not any(
                requirement.marker.evaluate({"extra": e}) for e in (context or {""})):
            continue
        dist = importlib.metadata.distribution(requirement.name)
        name = dist.metadata["Name"].lower()
        key = f"{name}[{','.join(sorted(requirement.extras))}]"
        if key in found:
            continue
        found.add(key)
        pending += [(Requirement(r), frozenset(requirement.extras)) for r in dist.requires or []]
    return {k.partition("[")[0] for k in found}


def _environment_of(root: Path, distributions: set[str]) -> Path:
    """A fresh virtual environment holding exactly ``distributions``, linked from this environment's copies."""
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(root)], check=True, timeout=120)
    python = root / "bin" / "python"
    purelib = Path(subprocess.run([python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                                  capture_output=True, text=True, check=True).stdout.strip())
    for name in distributions:
        dist = importlib.metadata.distribution(name)
        for top in {Path(str(f)).parts[0] for f in dist.files or [] if not str(f).startswith("..")}:
            if not (purelib / top).exists():
                (purelib / top).symlink_to(dist.locate_file(top))
    return python


def _extra_requirements(extra: str) -> list[str]:
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    return [*project["dependencies"], *project["optional-dependencies"][extra]]


def _imports_wan_pipeline(python: Path) -> subprocess.CompletedProcess:
    env = {**{k: v for k, v in os.environ.items() if k not in ("PYTHONHOME", "VIRTUAL_ENV")}, "PYTHONPATH": str(REPO)}
    # without its requirements diffusers hands out a stand-in class of the same name (from its dummy_* modules),
    # which fails only when used: the real one lives in its pipeline's module
    return subprocess.run([python, "-c", "from diffusers import WanPipeline\n"
                           "from wavealign.integrations import diffusers as wa\nprint(WanPipeline.__module__)"],
                          capture_output=True, text=True, timeout=300, env=env, cwd=REPO)


def test_an_environment_of_the_diffusers_extra_imports_wan_pipeline(tmp_path):
    started = time.monotonic()
    python = _environment_of(tmp_path / "env", _closure(_extra_requirements("diffusers")))
    done = _imports_wan_pipeline(python)
    print(f"environment built and imported in {time.monotonic() - started:.1f} s")
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.strip() == "diffusers.pipelines.wan.pipeline_wan"


def test_the_same_environment_without_transformers_has_only_diffusers_stand_in_for_wan_pipeline(tmp_path):
    # the check above is of the extra, not of this environment: without transformers the import fails there
    requirements = [r for r in _extra_requirements("diffusers") if Requirement(r).name != "transformers"]
    done = _imports_wan_pipeline(_environment_of(tmp_path / "env", _closure(requirements)))
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.strip() == "diffusers.utils.dummy_torch_and_transformers_objects"


def _without_distribution(monkeypatch, hidden: str) -> None:
    """Installed metadata without the distribution ``hidden``, as an install of another one providing its module has."""
    real = importlib.metadata.distribution

    def distribution(name: str):
        if name == hidden:
            raise importlib.metadata.PackageNotFoundError(name)
        return real(name)

    monkeypatch.setattr(importlib.metadata, "distribution", distribution)


def test_a_requirement_whose_module_another_distribution_provides_counts_as_installed(monkeypatch):
    from jobs import cli

    _without_distribution(monkeypatch, "mlflow")  # mlflow-skinny alone installs the module mlflow
    assert cli.missing_requirement("sweep") is None


def test_a_requirement_neither_installed_nor_provided_is_named(monkeypatch):
    from jobs import cli

    _without_distribution(monkeypatch, "mlflow")
    real_find_spec = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "mlflow" else
                        real_find_spec(name, *a))
    assert cli.missing_requirement("sweep") == "mlflow"
