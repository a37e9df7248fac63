"""Stop the embedded Ray of a driver that was killed outright (SIGKILL, the OOM killer), at once.

Ray ties the head processes it starts for a driver (GCS, raylet) to that driver's life, but their worker
processes (each in a process group of its own) go on with the cell they were running, and Ray's agents linger, for
a minute or more after the driver is gone, holding CPUs and GPUs. ``start`` launches this module in a session of its
own (so that a signal to the driver's process group does not reach it) with a pipe from the driver: every second
it notes the driver's descendant processes (from ``/proc``: pid and start time), and when the pipe closes without
the driver's word that it shut Ray down itself (``Watchdog.release``), it kills those of them still alive (the same
processes: their start times match) and exits. Linux only (``/proc``); elsewhere ``start`` returns None.

A watchdog that ends while its driver runs (killed by a user, the OOM killer) is noticed at once by a thread of the
driver waiting on it, named in a warning, and replaced by a new one, which notes the driver's processes afresh: a
driver killed later still takes its Ray with it.
"""

from __future__ import annotations

import logging
import os
import select
import signal
import subprocess
import sys
import threading
from dataclasses import dataclass, field
from pathlib import Path

PROC = Path("/proc")
_RELEASED = b"released\n"
_POLL_S = 1.0
_log = logging.getLogger(__name__)


@dataclass
class Watchdog:
    """The running watchdog of this driver, replaced by a new one whenever it ends before ``release``."""

    process: subprocess.Popen
    released: bool = False
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def __post_init__(self) -> None:
        threading.Thread(target=self._keep, name="wavealign-watchdog-keeper", daemon=True).start()

    def _keep(self) -> None:
        """Wait on the watchdog; one that ended before ``release`` is named and replaced."""
        while True:
            process = self.process
            status = process.wait()
            with self._lock:
                if self.released:
                    return
                how = f"killed by {signal.Signals(-status).name}" if status < 0 else f"exit status {status}"
                self.process = _spawn()
            _log.warning("the watchdog (pid %d) that stops this driver's Ray if the driver is killed ended (%s); "
                         "started another (pid %d)", process.pid, how, self.process.pid)

    def release(self) -> None:
        """This driver shut its Ray down itself: the watchdog exits without killing anything."""
        with self._lock:
            self.released = True
        try:
            self.process.stdin.write(_RELEASED)
            self.process.stdin.close()
        except OSError:
            pass  # it is gone already
        self.process.wait(timeout=10)


def start() -> Watchdog | None:
    """Watch this process (see the module's docstring); None where there is no ``/proc``."""
    if not (PROC / str(os.getpid()) / "stat").is_file():
        return None
    return Watchdog(_spawn())


def _spawn() -> subprocess.Popen:
    """A watchdog of this process, in a session of its own, with a pipe from this process."""
    return subprocess.Popen([sys.executable, "-m", "orchestrator.watchdog", str(os.getpid())],
                            stdin=subprocess.PIPE, start_new_session=True, close_fds=True)


def _processes() -> dict[int, tuple[int, int]]:
    """Every process: pid -> (parent pid, start time in clock ticks since boot)."""
    found = {}
    for entry in PROC.iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue  # ended meanwhile
        fields = stat[stat.rindex(")") + 2:].split()  # after "pid (comm) ": state, ppid, ..., starttime (22nd)
        found[int(entry.name)] = (int(fields[1]), int(fields[19]))
    return found


def descendants(pid: int) -> dict[int, int]:
    """The processes below ``pid``: pid -> start time."""
    table = _processes()
    children: dict[int, list[int]] = {}
    for child, (parent, _) in table.items():
        children.setdefault(parent, []).append(child)
    found, todo = {}, list(children.get(pid, []))
    while todo:
        child = todo.pop()
        found[child] = table[child][1]
        todo += children.get(child, [])
    return found


def kill_still_running(noted: dict[int, int]) -> list[int]:
    """SIGKILL each noted process that is still the same process (its start time unchanged); returns their pids."""
    alive = _processes()
    killed = []
    for pid, started in noted.items():
        if alive.get(pid, (0, -1))[1] == started:
            try:
                os.kill(pid, signal.SIGKILL)
                killed.append(pid)
            except ProcessLookupError:
                pass
    return killed


def _watch(driver: int) -> int:
    noted: dict[int, int] = {}
    stdin = sys.stdin.buffer
    received = b""
    while True:
        noted.update(descendants(driver))
        ready, _, _ = select.select([stdin], [], [], _POLL_S)
        if ready:
            chunk = os.read(stdin.fileno(), 64)
            received += chunk
            if not chunk:  # the pipe closed: the driver ended, one way or the other
                break
    noted.pop(os.getpid(), None)
    if received != _RELEASED:
        kill_still_running(noted)
    return 0


if __name__ == "__main__":
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # a Ctrl-C meant for the driver is not for the watchdog
    sys.exit(_watch(int(sys.argv[1])))
