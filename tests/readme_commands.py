"""Commands the README gives, read from it, so that a test runs them as written."""

from __future__ import annotations

import shlex
from pathlib import Path

README = Path(__file__).resolve().parent.parent / "README.md"


def ray_job_submit() -> tuple[list[str], list[str]]:
    """The README's `ray job submit` command as words: its options, and its entrypoint (the words after `--`)."""
    (line,) = [ln for ln in README.read_text().splitlines() if ln.startswith("ray job submit")]
    words = shlex.split(line.split("#")[0])
    return words[:words.index("--")], words[words.index("--") + 1:]
