"""The old module name ``wavealign.reorder`` (renamed ``wavealign.launch_order``) still imports for one release:
with a DeprecationWarning naming the new name, and as the very same module."""

from __future__ import annotations

import importlib
import subprocess
import sys
import warnings

import pytest

from wavealign import launch_order


@pytest.fixture
def unimported(monkeypatch):
    """A process in which ``wavealign.reorder`` was never imported (the warning fires on the first import)."""
    for name in ("wavealign.reorder", "wavealign.reorder.plan_graphs", "wavealign.reorder.block_gather"):
        monkeypatch.delitem(sys.modules, name, raising=False)


def test_importing_the_old_name_warns_once_naming_the_new_one(unimported):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        importlib.import_module("wavealign.reorder")
        importlib.import_module("wavealign.reorder")  # imported already: no second warning
        importlib.import_module("wavealign.reorder.plan_graphs")
    assert [(w.category, str(w.message).split(":")[0]) for w in caught] == [
        (DeprecationWarning, "wavealign.reorder is renamed wavealign.launch_order")]


def test_the_old_name_is_the_new_module_itself_with_its_submodules(unimported):
    with pytest.warns(DeprecationWarning):
        from wavealign.reorder import RowOrder, plan, plan_graphs
    assert sys.modules["wavealign.reorder"] is launch_order
    assert (RowOrder, plan, plan_graphs) == (launch_order.RowOrder, launch_order.plan, launch_order.plan_graphs)
    assert importlib.import_module("wavealign.reorder.block_gather") is launch_order.block_gather


def test_code_written_against_the_old_name_runs_and_is_told_where_it_imported_it():
    """As a user's script sees it: the warning shows by default (it points at the script's own import line)."""
    script = ("import torch\nimport wavealign.reorder as reorder\n"
              "order = reorder.plan(torch.rand(2, 8, 8) < 0.5, wave_size=4)\nprint(order.perm.shape)\n")
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "torch.Size([2, 8])"
    assert "<string>:2: DeprecationWarning: wavealign.reorder is renamed wavealign.launch_order" in done.stderr
