"""A check of ``table.py`` on the committed Table I run (issue 12's Nsight Compute cells, ``../table1-fa4-h200``):
the markdown rows carry each method's density, Nsight Compute hits and misses, and a controls run without dense is
refused. It pins this study's script, not the library, so it lives here and not in the test suite:

    python benchmarks/results/scene-workload-h200/check_table.py

Prints ``ok`` and exits 0, or stops at the first failed assertion.
"""

from __future__ import annotations

import contextlib
import io
import runpy
import shutil
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
TABLE1_NCU = HERE.parent / "table1-fa4-h200" / "results-ncu"


def run(table_main, argv: list[str]) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = table_main(argv)
    return code, out.getvalue(), err.getvalue()


def main() -> int:
    table_main = runpy.run_path(str(HERE / "table.py"))["main"]
    with tempfile.TemporaryDirectory() as folder:
        # a copy: reading a run root may quarantine files, and the committed run stays as it is
        shutil.copytree(TABLE1_NCU, Path(folder) / "results")
        code, out, _ = run(table_main, ["table", folder])
        assert code == 0, code
        row = "| wan14b-720p | clusters | minference |"
        minference = next(line for line in out.splitlines() if line.startswith(row))
        # 33.0% against 18.3%; NCU 42.36% original, 94.2% after S1+S2; 42.36 / 15.77 (the iid control) = 2.69x
        assert "| 33.0% | 18.3% | 1484.4 | 1368.2 | 8.28 | 1.085 |" in minference, minference
        assert "| 42.4% | 94.2% | 21.7% | 2.69x | 2.05x |" in minference, minference
        assert "+14.7 pts density; +20.7 pts L2 hit; +31.2% L2 / random" in minference, minference
        assert "| wan14b-720p | clusters | random |" in out
        assert "Distance to Table I" in out and "wan14b-720p " in out.splitlines()[-1]
        code, _, err = run(table_main, ["settings", folder])
        assert code == 2 and "no dense cell with an Nsight Compute L2 hit" in err, (code, err)
    print("ok")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
