"""The checkout's import graph as a reader or a tool that maps import names to paths sees it (``import_reader.py``
reads it: each module named by its path, each import statement, at any depth, an arrow to the module its name gives).
Prints the modules, the arrows within and between the top-level folders, and the circles (groups of modules that
import one another in a loop; imports made through ``importlib`` are not read).

    python docs/structure/import_graph.py [ROOT]   # ROOT: a checkout, default this one
"""

from __future__ import annotations

import sys
from collections import Counter
from pathlib import Path

from import_reader import cycles, graph, modules

FOLDERS = ("wavealign", "orchestrator", "jobs", "analysis", "lab")


def main() -> None:
    root = Path(sys.argv[1] if len(sys.argv) > 1 else Path(__file__).resolve().parents[2])
    known = modules(root, FOLDERS)
    arrows = graph(known)
    by_folder = Counter((a.split(".")[0], b.split(".")[0]) for a, targets in arrows.items() for b in targets)
    print(f"{len(known)} modules, {sum(map(len, arrows.values()))} arrows")
    for (a, b), n in sorted(by_folder.items()):
        print(f"  {a} -> {b}: {n}")
    loops = cycles(arrows)
    print(f"{len(loops)} circles" + "".join(f"\n  {' '.join(c)}" for c in loops))


if __name__ == "__main__":
    main()
