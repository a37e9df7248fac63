"""The code fingerprint in cell and sweep ids: it moves with the code's statements and docstrings, not with
comments, blank lines or trailing spaces."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

import wavealign
from wavealign import fingerprint, user_config

REPO = Path(__file__).resolve().parent.parent

CODE = '''"""A module."""

import math


def area(r):
    return math.pi * r * r  # the disc
'''


@pytest.fixture
def package(tmp_path):
    (tmp_path / "kernels").mkdir()
    (tmp_path / "geometry.py").write_text(CODE)
    (tmp_path / "kernels" / "__init__.py").write_text("X = 1\n")
    return tmp_path


def test_the_digest_is_stable(package):
    assert fingerprint.source_digest(package) == fingerprint.source_digest(package)
    assert len(fingerprint.source_digest(package)) == 12


@pytest.mark.parametrize("edit", [
    lambda s: s.replace("# the disc", "# the area of a disc"),
    lambda s: s.replace("\n\n\ndef", "\n\n\n\n# a comment line\n\ndef"),
    lambda s: s.replace("r * r", "r * r   "),
])
def test_comments_blank_lines_and_trailing_spaces_do_not_move_it(package, edit):
    before = fingerprint.source_digest(package)
    (package / "geometry.py").write_text(edit(CODE))
    assert fingerprint.source_digest(package) == before


@pytest.mark.parametrize("edit", [
    lambda s: s.replace("r * r", "r ** 2"),
    lambda s: s.replace("A module.", "A module about discs."),
])
def test_a_statement_or_docstring_change_moves_it(package, edit):
    before = fingerprint.source_digest(package)
    (package / "geometry.py").write_text(edit(CODE))
    assert fingerprint.source_digest(package) != before


def test_a_new_or_moved_module_moves_it_and_bytecode_does_not(package):
    before = fingerprint.source_digest(package)
    (package / "__pycache__").mkdir()
    (package / "__pycache__" / "stale.py").write_text("Y = 2\n")
    assert fingerprint.source_digest(package) == before
    (package / "kernels" / "__init__.py").rename(package / "kernels" / "moved.py")
    assert fingerprint.source_digest(package) != before


def test_the_code_version_is_the_package_version_plus_the_digest_of_the_library():
    assert fingerprint.code_version() == f"{wavealign.__version__}+{fingerprint.source_digest()}"


def test_cell_and_sweep_ids_are_the_same_in_every_process(tmp_path):
    """A resumed sweep finds its done cells by id, from a new driver process: ids must not depend on the
    interpreter's string-hash seed, set order or anything else a process draws afresh."""
    program = ("from orchestrator import config, grid, plan\n"
               "cfg = config.load(['~sweep', 'grid.hardware=[cpu,h100]', 'grid.backend=[reference,sim]', "
               "'grid.method=[planted,random]', 'grid.workload=[shape-2h]', 'grid.seq_k=[1,2]', "
               f"'grid.variant=[original,wavealign,adaptive]', 'run_root={tmp_path}'])\n"
               "print(plan.make_plan(cfg).sweep_id, *sorted(c.cell_id for c in grid.expand(cfg).cells))\n")
    runs = [subprocess.run([sys.executable, "-c", program], capture_output=True, text=True, check=True, cwd=REPO,
                           env={**os.environ, "PYTHONHASHSEED": seed}).stdout.split() for seed in ("1", "2")]
    assert runs[0] == runs[1] and len(runs[0]) > 10


def test_a_profile_the_user_installed_moves_the_code_version(tmp_path, monkeypatch):
    """A fitted skip profile or generator in the user's folder changes what the library decides: a resumed sweep
    must not keep cells measured before it was installed."""
    monkeypatch.setenv(user_config.HOME_ENV, str(tmp_path))
    fingerprint.code_version.cache_clear()
    try:
        plain = fingerprint.code_version()
        user_config.profiles_dir().mkdir(parents=True)
        (user_config.profiles_dir() / "h200.yaml").write_text("hardware: h200\n")
        fingerprint.code_version.cache_clear()
        installed = fingerprint.code_version()
        assert installed.startswith(plain + ".user") and installed != plain
    finally:
        fingerprint.code_version.cache_clear()
