"""The A/A study's run roots judged by the rule before issue 48 (``wavealign compare`` and the summary's lines at
ca178fe), for the before/after in README.md. Run from a checkout of ca178fe:

    git archive ca178fe | tar -x -C /tmp/base && cd /tmp/base && python old_rule.py RUN_ROOT RUN_ROOT ...
"""

import itertools
import sys
from collections import Counter

from analysis import compare
from orchestrator import dataset
from orchestrator.progress import summary_lines

roots = sys.argv[1:]
c = Counter()
for a, b in itertools.permutations(roots, 2):
    for cell in compare.compare(compare.Side(a), compare.Side(b)).cells:
        c[cell.verdict_word] += 1
w = Counter()
for r in roots:
    for line in summary_lines(list(dataset.newest_per_cell(dataset.read(r).to_pylist()).values())):
        if line.variant != "original":
            w[(line.variant, line.verdict)] += 1
print("compare (old rule):", dict(c), "called:", c["faster"] + c["slower"], "of", sum(c.values()))
print("within-run lines (old rule):", dict(w))
