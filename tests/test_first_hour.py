"""What a newcomer meets after ``make run``: the default sweep, run as the Makefile runs it (the environment's
``wavealign`` script, that environment not activated) in two fresh run roots. The next steps it prints run as printed
(the report exits 0; the MLflow UI serves the page it names until it is stopped), and the two runs give the same
verdict, significant or not, on every line of the summary. No timing is asserted: the verdicts are compared."""

from __future__ import annotations

import os
import shlex
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from orchestrator import dataset
from orchestrator.progress import verdicts
from wavealign import metrics

pytestmark = pytest.mark.slow
BIN = Path(sys.executable).parent


def _wavealign() -> list[str]:
    script = BIN / "wavealign"
    return [str(script)] if script.is_file() else [sys.executable, "-m", "jobs.cli"]


def _not_activated() -> dict[str, str]:
    """This environment as a shell that never activated the venv has it: its bin folder off PATH."""
    path = [p for p in os.environ.get("PATH", "").split(os.pathsep) if p and Path(p).resolve() != BIN.resolve()]
    env = {k: v for k, v in os.environ.items() if k not in ("VIRTUAL_ENV", "COLUMNS", "WAVEALIGN_TRACEBACK")}
    return {**env, "PATH": os.pathsep.join(path)}


@pytest.fixture(scope="module")
def two_runs(tmp_path_factory) -> list[tuple[Path, Path, str]]:
    """(working folder, run root, what it printed) of two default sweeps, each in a fresh run root."""
    runs = []
    for name in ("first", "second"):
        here = tmp_path_factory.mktemp(name)
        done = subprocess.run([*_wavealign(), "sweep", "run_root=wavealign-runs"], cwd=here, env=_not_activated(),
                              capture_output=True, text=True, timeout=600)
        assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
        runs.append((here, here / "wavealign-runs", done.stdout))
    return runs


def _printed(stdout: str, label: str) -> str:
    """The command a closing line ``<label>  <command>  (what it gives)`` prints."""
    line = next(line for line in stdout.splitlines() if line.startswith(label))
    return line.removeprefix(label).strip().split("  (")[0]


def test_the_printed_report_command_runs_as_printed(two_runs):
    here, root, stdout = two_runs[0]
    command = _printed(stdout, "report:")
    done = subprocess.run(command, shell=True, cwd=here, env=_not_activated(), capture_output=True, text=True,
                          timeout=600)
    assert done.returncode == 0, f"{command}\n{done.stdout[-2000:]}\n{done.stderr[-2000:]}"
    assert (root / "report" / "report.html").is_file()


def test_the_printed_mlflow_ui_command_serves_the_page_it_names(two_runs):
    here, _, stdout = two_runs[0]
    command = _printed(stdout, "MLflow:")
    address = next(line.split("then open ")[1] for line in stdout.splitlines() if "then open " in line)
    with socket.socket() as probe:  # the printed port (5000) may be taken on this machine: the same on a free one
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    server = subprocess.Popen([*shlex.split(command), "--port", str(port)], cwd=here, env=_not_activated(),
                              stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        page = address.replace("127.0.0.1:5000", f"127.0.0.1:{port}")
        deadline, status = time.monotonic() + 120, None
        while status is None and time.monotonic() < deadline and server.poll() is None:
            try:
                with urllib.request.urlopen(page, timeout=5) as response:
                    status = response.status
            except OSError:
                time.sleep(1)
        assert status == 200, server.stderr.read() if server.poll() is not None else f"{page} never answered"
    finally:
        server.terminate()
        server.wait(timeout=60)


def test_two_fresh_runs_give_the_same_verdict_on_every_line(two_runs):
    first, second = (verdicts(dataset.read(root).to_pylist()) for _, root, _ in two_runs)
    assert set(first) == set(second) and len(first) == 20
    predicted = {key for key, verdict in first.items() if verdict.endswith(metrics.PREDICTED)}
    assert predicted and {key: first[key] for key in predicted} == {key: second[key] for key in predicted}
    # a CPU line's verdict is the paired interval's, measured on a shared CPU: it may differ between runs, but it is
    # always one of the rule's words
    measured = set(first) - predicted
    assert {first[key] for key in measured} | {second[key] for key in measured} <= {"baseline", *metrics.VERDICTS}
