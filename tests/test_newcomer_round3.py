"""Issue 49, a newcomer's first hour, round 3: a value mistake, a bad path or an unmakeable run root is answered
before the library (torch), Ray or MLflow is imported: one stderr line naming the argument, exit 2. Each runs in a
fresh interpreter, since this one has long imported them; what is checked is which modules were loaded when the
command answered, not how long it took."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from jobs import cli

ROOT = Path(__file__).resolve().parents[1]
HEAVY = ("torch", "ray", "mlflow")
# the command as the console script runs it, then which of HEAVY it had imported by the time it answered
CHILD = f"""
import json, sys
from jobs import cli
code = cli.main(sys.argv[1:])
print(json.dumps({{"code": code, "loaded": [m for m in {HEAVY!r} if m in sys.modules]}}))
"""


def _answer(*argv: str, cwd: Path) -> tuple[int, list[str], str]:
    """(exit status, heavy modules loaded when it answered, stderr) of ``wavealign *argv`` in a new interpreter."""
    done = subprocess.run([sys.executable, "-c", CHILD, *argv], cwd=cwd, capture_output=True, text=True, timeout=120,
                          env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"})
    answer = json.loads(done.stdout.strip().splitlines()[-1])
    return answer["code"], answer["loaded"], done.stderr


@pytest.mark.parametrize(("argv", "said"), [
    (["sweep", "sweep=nosuch"], "sweep=nosuch has no conf/sweep/nosuch.yaml; expected one of ["),
    (["sweep", "grid.seq_k=[abc]"], "grid.seq_k has 'abc'; expected a number"),
    (["sweep", "run_root=/proc/wavealign-runs"],
     "run_root=/proc/wavealign-runs: cannot make the folder /proc/wavealign-runs or write a file in it"),
    (["bench-kernels", "run_root=/proc/wavealign-runs"], "run_root=/proc/wavealign-runs: cannot make the folder"),
    (["sweep", "run_root=a-file/runs"], "run_root=a-file/runs: cannot make the folder"),
    (["report", "--run-root", "no-such-runs"], "--run-root no-such-runs is no such folder"),
], ids=["preset", "value", "run-root-under-proc", "bench-kernels-run-root", "run-root-under-a-file", "report-path"])
def test_a_mistake_is_one_line_and_exit_2_before_torch_ray_or_mlflow_load(tmp_path, argv, said):
    (tmp_path / "a-file").write_text("")
    code, loaded, err = _answer(*argv, cwd=tmp_path)
    assert code == 2
    assert err.startswith(f"wavealign {argv[0]}: {said}") and len(err.strip().splitlines()) == 1, err
    assert loaded == [], f"{loaded} were imported before the answer"


def test_a_run_root_that_can_be_made_is_tried_without_leaving_a_folder_behind(tmp_path, capsys):
    """The run root is made and removed again to try it; a mistake found after (here a method name, which needs the
    library) leaves no empty folder where none was."""
    code = cli.main(["sweep", f"run_root={tmp_path / 'a' / 'runs'}", "grid.method=[nosuch]"])
    assert code == 2 and "unknown method 'nosuch'" in capsys.readouterr().err
    assert list(tmp_path.iterdir()) == []


def test_a_dry_run_does_not_try_the_run_root(tmp_path, capsys):
    """--dry-run writes nothing, so a run root it could not make is not its concern."""
    code = cli.main(["sweep", "--dry-run", "~sweep", "run_root=/proc/wavealign-runs", "grid.hardware=[cpu]",
                     "grid.backend=[reference]", "grid.method=[random]", "grid.workload=[shape-2h]", "grid.seq_k=[0.5]",
                     "grid.variant=[original]"])
    assert code == 0, capsys.readouterr().err


def test_the_readme_names_the_torch_build_make_installs_and_how_to_tell_it_is_the_cpu_one():
    """The README's `pip install torch==X` (what `make` runs on a machine without a GPU) is the Makefile's
    TORCH_CPU, and the README says how to see which build that is before installing it."""
    import re

    pinned = re.search(r"^TORCH_CPU \?= (\S+)", (ROOT / "Makefile").read_text(), re.MULTILINE).group(1)
    readme = " ".join((ROOT / "README.md").read_text().split())
    assert f"`pip install {pinned}`" in readme and f"`pip install --dry-run {pinned}`" in readme
    assert f"`{pinned.replace('==', '-')}+cpu`" in readme


def test_the_early_check_takes_an_old_spelling_the_config_upgrades():
    from jobs.sweep import check_before_loading
    from orchestrator.config_schema import ConfigError

    check_before_loading(["grid.ncu=true"], show_cfg=True)  # compat: today's grid.measure=[ncu]
    with pytest.raises(ConfigError, match=r"grid\.ncu is a switch"):
        check_before_loading(["grid.ncu=no"], show_cfg=True)
