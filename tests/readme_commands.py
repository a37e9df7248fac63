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


def shared_host_ray_start() -> tuple[list[str], list[str]]:
    """The README's `ray start` lines for a shared host (those that move the dashboard agent's port): the head's
    options and a worker node's, as words."""
    lines = [ln for ln in README.read_text().splitlines()
             if ln.startswith("ray start") and "--dashboard-agent-listen-port" in ln]
    (head,) = [ln for ln in lines if "--head" in ln]
    (worker,) = [ln for ln in lines if "--head" not in ln]
    return shlex.split(head.split("#")[0])[2:], shlex.split(worker.split("#")[0])[2:]
