"""Credentials never recorded or printed, and the files that may hold configuration readable by the owner and the
owner's group only (issue 32)."""

from __future__ import annotations

import contextlib
import io
import os
import subprocess
import sys
import time
from contextlib import redirect_stderr, redirect_stdout
from pathlib import Path

import pytest

from jobs import cli, sync_mlflow
from orchestrator import files
from orchestrator.redact import redact

SECRET = "s3cretTOKEN"


@pytest.mark.parametrize(("text", "expected"), [
    ("http://alice:s3cretTOKEN@127.0.0.1:9", "http://alice:***@127.0.0.1:9"),
    ("mlflow.tracking_uri=postgresql+psycopg2://bob:pw%40x@db:5432/mlflow",
     "mlflow.tracking_uri=postgresql+psycopg2://bob:***@db:5432/mlflow"),
    ("https://mlflow.lab/api?token=abc123&x=1", "https://mlflow.lab/api?token=***&x=1"),
    ("https://h/p?api_key=k1;sig=zz", "https://h/p?api_key=***;sig=***"),
    ("https://h/p?access_token=t&PASSWORD=p", "https://h/p?access_token=***&PASSWORD=***"),
])
def test_a_uri_s_password_and_query_tokens_are_redacted(text, expected):
    assert redact(text) == expected


@pytest.mark.parametrize("text", ["http://127.0.0.1:5000/#/experiments/1", "sqlite:////tmp/runs/mlflow.db",
                                  "http://alice@mlflow.lab", "grid.seq_k=[148,364] ray.address=10.0.0.1:6379"])
def test_text_without_secrets_is_left_as_it_is(text):
    assert redact(text) == text


@pytest.fixture(scope="module")
def swept(tmp_path_factory):
    """A one-cell sweep given a tracking URI with a password (nothing answers there), then its rows synced to a
    local store; and everything the two printed."""
    tmp = tmp_path_factory.mktemp("secrets")
    root, store = tmp / "runs", tmp / "store" / "mlflow.db"
    printed = io.StringIO()
    with pytest.MonkeyPatch.context() as mp, redirect_stdout(printed), redirect_stderr(printed):
        mp.setenv("RAY_ADDRESS", "local")
        code = cli.main(["sweep", "~sweep", "grid.hardware=[cpu]", "grid.backend=[reference]", "grid.method=[random]",
                               "grid.workload=[shape-2h]", "grid.seq_k=[0.5]", "grid.variant=[original]",
                               "grid.reps=1", "grid.warmup=0", "progress=false", "ray.num_cpus=1",
                               f"mlflow.tracking_uri=http://alice:{SECRET}@127.0.0.1:9", f"run_root={root}"])
        synced = sync_mlflow.main([f"run_root={root}", f"mlflow.tracking_uri=sqlite:///{store}"])
    assert (code, synced) == (0, 0), printed.getvalue()[-3000:]
    return root, store, printed.getvalue()


def test_no_password_reaches_the_results_the_sweep_folder_the_lock_or_the_mlflow_store(swept):
    root, store, _ = swept
    written = [p for p in (*root.rglob("*"), *store.parent.rglob("*")) if p.is_file()]
    assert {p.name for p in written} >= {"config.yaml", "summary.txt", ".lock", "mlflow.db"}
    assert any(p.suffix == ".parquet" for p in written)
    assert [p for p in written if SECRET.encode() in p.read_bytes()] == []


def test_the_recorded_repro_command_keeps_the_uri_without_its_password(swept):
    root, _, _ = swept
    from orchestrator import dataset

    (command,) = dataset.read(root).column("repro_command").to_pylist()
    assert "mlflow.tracking_uri=http://alice:***@127.0.0.1:9" in command


def test_no_password_is_printed(swept):
    _, _, printed = swept
    assert "alice:***@127.0.0.1:9" in printed and SECRET not in printed


def test_the_files_that_may_hold_configuration_are_owner_and_group_only(swept):
    root, store, _ = swept
    for path in [*root.glob("results/**/*.parquet"), *root.glob("sweeps/*/*"), root / ".lock", store]:
        assert path.stat().st_mode & 0o777 == files.FILE_MODE, path


def test_the_lock_file_names_its_holder_s_command_without_the_password(tmp_path, monkeypatch):
    from orchestrator import lock

    monkeypatch.setattr(sys, "argv", ["wavealign", "sweep", f"mlflow.tracking_uri=https://bob:{SECRET}@mlflow.lab"])
    with lock.hold(tmp_path, "wavealign sweep t") as path:
        text = path.read_text()
    assert "https://bob:***@mlflow.lab" in text and SECRET not in text
    assert path.stat().st_mode & 0o777 == files.FILE_MODE


def test_with_a_private_network_the_embedded_ray_listens_in_a_namespace_of_its_own(tmp_path):
    from orchestrator import netns, watchdog

    if (reason := netns.unavailable(None, None)) is not None:
        pytest.skip(reason)
    repo = Path(__file__).resolve().parent.parent
    proc = subprocess.Popen([sys.executable, "-m", "jobs.cli", "sweep", "~sweep", "grid.hardware=[cpu]",
                             "grid.backend=[reference]", "grid.method=[random]", "grid.workload=[shape-2h]",
                             "grid.seq_k=[2.048]", "grid.seed=[0,1]", "grid.variant=[original]", "grid.reps=40",
                             "progress=false", "ray.num_cpus=1", "mlflow.enabled=false", "ray.private_network=true",
                             f"run_root={tmp_path / 'runs'}"], cwd=repo, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True, env={**os.environ, "RAY_ADDRESS": "local"})
    ours = os.readlink("/proc/self/ns/net")
    namespaces = set()
    deadline = time.monotonic() + 300
    while not namespaces and proc.poll() is None and time.monotonic() < deadline:
        for pid in watchdog.descendants(proc.pid):
            with contextlib.suppress(OSError):
                if Path(f"/proc/{pid}/comm").read_text().strip() == "raylet":
                    namespaces.add(os.readlink(f"/proc/{pid}/ns/net"))
        time.sleep(0.1)
    out, _ = proc.communicate(timeout=300)
    assert proc.returncode == 0, out[-3000:]
    assert namespaces and ours not in namespaces
    assert "this run: done 2" in out


def test_a_private_network_with_a_remote_mlflow_store_is_refused_in_one_line(tmp_path, capsys):
    code = cli.main(["sweep", "~sweep", "grid.hardware=[cpu]", "grid.backend=[reference]", "grid.method=[random]",
                           "grid.workload=[shape-2h]", "grid.seq_k=[0.5]", "ray.private_network=true",
                           "mlflow.tracking_uri=https://mlflow.lab", f"run_root={tmp_path}"])
    err = capsys.readouterr().err
    assert code == 2
    assert err.strip() == ("wavealign sweep: ray.private_network=true, but the MLflow store (https://...) is reached "
                           "over the network; expected a local one (sqlite, a path)")
