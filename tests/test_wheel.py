"""A wheel that works anywhere: built from this checkout and installed into a fresh virtual environment, it holds the
library, the sweep (``orchestrator``, ``jobs``, ``analysis``, each named as its folder) and its configs, and runs
``wavealign sweep`` from a folder outside the checkout. The code imports the sweep packages by those names only; the
old ``wavealign.*`` names are deprecated aliases of the same modules."""

from __future__ import annotations

import ast
import json
import os
import shutil
import site
import subprocess
import sys
import time
import tomllib
import zipfile
from pathlib import Path

import pytest

import wavealign
from wavealign import fingerprint

REPO = Path(__file__).resolve().parent.parent
PYPROJECT = tomllib.loads((REPO / "pyproject.toml").read_text())
# package -> the repository folder it is built from: each top-level package its own folder, conf/ as declared
TOP_LEVEL = sorted({p.split(".")[0] for p in PYPROJECT["tool"]["setuptools"]["packages"]})
SOURCES = {**{name: name for name in TOP_LEVEL}, **PYPROJECT["tool"]["setuptools"]["package-dir"]}
SWEEP_PACKAGES = ("orchestrator", "jobs", "analysis")
# one exact reference-kernel cell on this CPU: 512 tokens, 2 heads, the original order, one repetition
ONE_CELL = ["~sweep", "grid.hardware=[cpu]", "grid.backend=[reference]", "grid.method=[random]",
            "grid.workload=[shape-2h]", "grid.seq_k=[0.5]", "grid.variant=[original]", "grid.reps=1",
            "grid.warmup=0", "progress=false", "mlflow.enabled=false", "ray.num_cpus=1"]

pytestmark = pytest.mark.slow


def _run(args: list, **kwargs) -> subprocess.CompletedProcess:
    done = subprocess.run([str(a) for a in args], capture_output=True, text=True, timeout=600, **kwargs)
    assert done.returncode == 0, f"{args}: exit {done.returncode}\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
    return done


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> Path:
    """The wheel, built from a copy of what it is built from: building in the checkout would leave build/ there,
    and whatever a stale build/lib still holds would slip into the wheel."""
    src = tmp_path_factory.mktemp("src")
    for name in ("pyproject.toml", "README.md"):
        shutil.copy2(REPO / name, src / name)
    for folder in SOURCES.values():
        shutil.copytree(REPO / folder, src / folder, ignore=shutil.ignore_patterns("__pycache__"))
    dist = tmp_path_factory.mktemp("dist")
    started = time.monotonic()
    _run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "--no-index", "-q",
          "-w", dist, src])
    print(f"wheel built in {time.monotonic() - started:.1f} s")
    (built,) = dist.glob("wavealign-*.whl")
    return built


@pytest.fixture(scope="module")
def venv(wheel, tmp_path_factory) -> Path:
    """A fresh virtual environment with the wheel installed, borrowing this environment's dependencies."""
    root = tmp_path_factory.mktemp("venv")
    _run([sys.executable, "-m", "venv", "--without-pip", root])
    python = root / "bin" / "python"
    purelib = _run([python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"]).stdout.strip()
    # torch, Ray, Hydra, ... without installing them again: this environment's site-packages on the new one's path,
    # after its own (so the wheel wins). The .pth files of a folder added this way are not run, so this
    # environment's editable install of the checkout stays out.
    (Path(purelib) / "borrowed-dependencies.pth").write_text("\n".join(site.getsitepackages()) + "\n")
    # --ignore-installed: the editable install seen through that path is neither uninstalled nor counted
    _run([sys.executable, "-m", "pip", "--python", python, "install", "--no-deps", "--no-index", "--ignore-installed",
          "-q", wheel])
    return root


@pytest.fixture
def outside(tmp_path) -> Path:
    """A working folder outside the checkout."""
    assert REPO not in tmp_path.parents
    return tmp_path


def _env(venv: Path) -> dict[str, str]:
    """This process's environment without anything that would lead back to the checkout."""
    env = {k: v for k, v in os.environ.items()
           if k not in ("PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV") and not k.startswith("WAVEALIGN_")}
    return {**env, "PATH": os.pathsep.join([str(venv / "bin"), env.get("PATH", "")])}


def test_the_wheel_installs_the_library_and_the_sweep_packages_by_their_folder_names(wheel):
    with zipfile.ZipFile(wheel) as whl:
        names = whl.namelist()
        dist_info = next(n.split("/")[0] for n in names if n.split("/")[0].endswith(".dist-info"))
        top_level = whl.read(f"{dist_info}/top_level.txt").decode().split()
    assert {n.split("/")[0] for n in names} == {"wavealign", *SWEEP_PACKAGES, dist_info}
    assert sorted(top_level) == sorted(["wavealign", *SWEEP_PACKAGES]) == TOP_LEVEL


def test_the_wheel_holds_every_module_yaml_and_kernel_source_of_the_checkout(wheel):
    expected = set()
    for package, folder in SOURCES.items():
        for path in (REPO / folder).rglob("*"):
            if path.suffix in (".py", ".yaml", ".cu") and "__pycache__" not in path.parts:
                expected.add("/".join([*package.split("."), *path.relative_to(REPO / folder).parts]))
    with zipfile.ZipFile(wheel) as whl:
        names = set(whl.namelist())
    assert {"wavealign/conf/config.yaml", "wavealign/conf/sweep/smoke.yaml", "jobs/cli.py",
            "orchestrator/config.py", "analysis/load.py", "wavealign/mask_bytes.cu",
            "wavealign/reorderers/wavealign/stage1.cu", "wavealign/conf/workload/shape-2h.yaml"} <= expected
    assert sorted(expected - names) == []


def test_the_installed_wheel_not_the_checkout_is_imported_and_has_the_checkout_s_fingerprint(venv, outside):
    probe = """
import importlib.util, json
import wavealign
from wavealign import fingerprint
from orchestrator import config
print(json.dumps({"file": wavealign.__file__, "checkout": wavealign.CHECKOUT and str(wavealign.CHECKOUT),
                  "conf_dir": str(config.CONF_DIR), "code_version": fingerprint.code_version(),
                  "sweep": [importlib.util.find_spec(n).origin for n in ("orchestrator", "jobs", "analysis")]}))
"""
    found = json.loads(_run([venv / "bin" / "python", "-c", probe], cwd=outside, env=_env(venv)).stdout)
    assert Path(found["file"]).is_relative_to(venv), found
    assert found["checkout"] is None
    assert Path(found["conf_dir"]).is_relative_to(venv) and (Path(found["conf_dir"]) / "config.yaml").is_file()
    assert all(Path(origin).is_relative_to(venv) for origin in found["sweep"]), found
    # the sweep's parts are not the library: a wheel and a checkout of the same code give the same cell ids
    assert found["code_version"] == fingerprint.code_version()


def test_wavealign_sweep_dry_run_runs_outside_the_checkout(venv, outside):
    done = _run([venv / "bin" / "wavealign", "sweep", "--dry-run", f"run_root={outside / 'runs'}"], cwd=outside,
                env=_env(venv))
    assert "sweep smoke" in done.stdout and "cells" in done.stdout, done.stdout


def test_a_one_cell_cpu_sweep_runs_outside_the_checkout_and_records_its_row(venv, outside):
    from orchestrator import dataset

    runs = outside / "runs"
    started = time.monotonic()
    _run([venv / "bin" / "wavealign", "sweep", *ONE_CELL, f"run_root={runs}"], cwd=outside, env=_env(venv))
    print(f"one-cell sweep in {time.monotonic() - started:.1f} s")
    rows = dataset.read(runs).to_pylist()
    assert len(rows) == 1, rows
    (row,) = rows
    assert (row["status"], row["hardware"], row["backend"], row["method"], row["variant"]) == (
        "done", "cpu", "reference", "random", "original")
    assert row["kernel_ms_median"] > 0
    assert row["git_sha"] is None  # an installed wheel has no checkout to name


def test_the_code_imports_the_sweep_packages_only_by_their_folder_names():
    # a module imported under two names runs twice: its registries fill twice and its classes differ. Only the
    # deprecated aliases (wavealign/_renamed.py) name the old ones
    old_names = {f"wavealign.{name}" for name in SWEEP_PACKAGES}
    found = []
    for folder in sorted({*SOURCES.values(), "tests", "benchmarks"}):
        for path in sorted((REPO / folder).rglob("*.py")):
            for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
                if isinstance(node, ast.Import):
                    modules = [alias.name for alias in node.names]
                elif isinstance(node, ast.ImportFrom) and not node.level:
                    modules = [node.module or ""]
                else:
                    continue
                found += [f"{path.relative_to(REPO)}:{node.lineno} {m}" for m in modules
                          if ".".join(m.split(".")[:2]) in old_names or (
                              m == "wavealign" and {a.name for a in node.names} & set(SWEEP_PACKAGES))]
    assert found == []


def test_a_checkout_imports_each_sweep_package_from_its_folder():
    from orchestrator import config

    assert wavealign.CHECKOUT == REPO
    assert Path(config.__file__).resolve() == REPO / "orchestrator" / "config.py"
    assert config.CONF_DIR == wavealign.conf_dir() == REPO / "conf"


@pytest.mark.parametrize("name", SWEEP_PACKAGES)
def test_the_old_name_of_a_sweep_package_is_a_deprecated_alias_of_the_same_module(name):
    import importlib

    sys.modules.pop(f"wavealign.{name}", None)
    with pytest.warns(DeprecationWarning, match=rf"wavealign\.{name} is deprecated: import {name} instead"):
        old = importlib.import_module(f"wavealign.{name}")
    assert old is importlib.import_module(name)


@pytest.mark.parametrize("name", ["wavealign.wavealign", "wavealign.wavealign.kernels", "wavealign.tests",
                                  "wavealign.deploy", "wavealign.benchmarks"])
def test_a_checkout_is_no_package_path_so_no_second_copy_of_the_library_or_its_other_folders_import(name):
    import importlib

    with pytest.raises(ModuleNotFoundError):
        importlib.import_module(name)
