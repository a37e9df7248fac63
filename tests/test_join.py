"""Which cluster a sweep joins and what it ships there (``orchestrator.join``), without a cluster: addresses that
name nothing, ``auto``'s resolution, and the driver inside a Ray job. The real `ray start` cluster, token refusals
and `ray job submit` are in tests/test_ray_start_cluster.py."""

from __future__ import annotations

import json
import re
import socket

import pytest

import wavealign
from jobs import cli
from orchestrator import config, join
from wavealign import user_config
from wavealign.registry import PLUGINS_ENV

CPU_CELLS = ["~sweep", "grid.hardware=[cpu]", "grid.backend=[reference]", "grid.method=[planted]",
             "grid.workload=[shape-2h]", "grid.seq_k=[1]"]


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def no_cluster_here(monkeypatch, tmp_path):
    """No RAY_ADDRESS, and Ray's temp dir (where `ray start` leaves its address) an empty folder; token mode
    stated, so that resolving ``auto`` turns nothing on in this process."""
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    monkeypatch.setenv("RAY_TMPDIR", str(tmp_path / "ray-tmp"))
    monkeypatch.setenv("RAY_AUTH_MODE", "disabled")
    return tmp_path / "ray-tmp"


@pytest.fixture
def in_a_ray_job(monkeypatch):
    """This process as the entrypoint of a Ray job whose runtime_env has a working_dir and sets one variable, as
    Ray's job supervisor hands it over."""
    job_env = {"working_dir": "gcs://_ray_pkg_0123.zip", "env_vars": {"MY_SETTING": "1"}}
    monkeypatch.setenv(join.RAY_JOB_CONFIG_JSON_ENV_VAR, json.dumps({"runtime_env": job_env, "metadata": {}}))
    return job_env


def test_a_ray_address_nothing_answers_at_stops_the_sweep_with_one_line_before_anything_is_written(tmp_path, capsys):
    port = closed_port()
    root = tmp_path / "runs"
    code = cli.main(["sweep", *CPU_CELLS, f"run_root={root}", f"ray.address=127.0.0.1:{port}"])
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1
    assert err.startswith(f"wavealign sweep: ray.address=127.0.0.1:{port}: nothing answers at 127.0.0.1:{port}")
    assert not root.exists()


@pytest.mark.parametrize(("address", "target"), [
    ("ray://127.0.0.1", "127.0.0.1:{port}"), ("ray://[::1]:{port}", "::1:{port}"), ("127.0.0.1:{port}", None)])
def test_the_check_reads_the_head_from_each_address_form(address, target, monkeypatch):
    port = closed_port()
    monkeypatch.setattr(join, "RAY_CLIENT_PORT", port)  # ray://host means Ray Client's port; 10001 may be in use here
    address = address.format(port=port)
    expected = (target or f"127.0.0.1:{port}").format(port=port)
    with pytest.raises(join.CannotJoin, match=re.escape(f"nothing answers at {expected}")):
        join.check(address, timeout_s=5)


def test_no_address_outside_a_ray_job_is_an_embedded_ray():
    assert join.resolve(None).address == join.EMBEDDED


def test_auto_with_no_cluster_started_here_stops_the_sweep_with_one_line(no_cluster_here, tmp_path, capsys):
    root = tmp_path / "runs"
    code = cli.main(["sweep", *CPU_CELLS, f"run_root={root}", "ray.address=auto"])
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1
    assert err.startswith("wavealign sweep: ray.address=auto: no Ray cluster to join (RAY_ADDRESS is unset and no "
                          f"`ray start` on this machine left {no_cluster_here / 'ray' / 'ray_current_cluster'})")
    assert not root.exists()


def test_auto_joins_the_head_ray_address_names(no_cluster_here, monkeypatch):
    monkeypatch.setenv("RAY_ADDRESS", "10.0.0.5:6379")
    assert join.resolve("auto") == join.Target("10.0.0.5:6379", "ray.address=auto, from RAY_ADDRESS")


def test_auto_joins_the_head_the_latest_ray_start_here_left(no_cluster_here):
    (no_cluster_here / "ray").mkdir(parents=True)
    (no_cluster_here / "ray" / "ray_current_cluster").write_text("10.0.0.6:6379\n")
    target = join.resolve("auto")
    assert target.address == "10.0.0.6:6379" and "the latest `ray start` on this machine" in target.found


def test_auto_refuses_a_dashboard_address_in_ray_address_naming_it(no_cluster_here, monkeypatch):
    monkeypatch.setenv("RAY_ADDRESS", "http://10.0.0.5:8265")
    with pytest.raises(join.CannotJoin, match=re.escape("RAY_ADDRESS='http://10.0.0.5:8265'; expected a head's "
                                                        "host:port or ray://host:port")):
        join.resolve("auto")


def test_a_driver_outside_a_ray_job_ships_its_checkout_and_import_path(monkeypatch):
    monkeypatch.delenv(join.RAY_JOB_CONFIG_JSON_ENV_VAR, raising=False)
    monkeypatch.setenv("PYTHONPATH", "/home/me/plugins")
    shipped = join.shipped_runtime_env(join.job_runtime_env())
    assert shipped["working_dir"] == str(wavealign.CHECKOUT) and ".git" in shipped["excludes"]
    assert shipped["env_vars"]["PYTHONPATH"] == "/home/me/plugins"


def test_a_driver_inside_a_ray_job_ships_only_what_the_job_lacks(in_a_ray_job, monkeypatch):
    monkeypatch.setenv("PYTHONPATH", "/tmp/ray/session/runtime_resources/working_dir_files/_ray_pkg_0123")
    monkeypatch.setenv(PLUGINS_ENV, "my_backend")
    monkeypatch.setenv("MY_SETTING", "1")
    monkeypatch.setenv(user_config.HOME_ENV, "/shared/home/me/.config/wavealign")
    assert join.shipped_runtime_env(join.job_runtime_env()) == {"env_vars": {
        PLUGINS_ENV: "my_backend", user_config.HOME_ENV: "/shared/home/me/.config/wavealign"}}


def test_inside_a_ray_job_no_address_is_the_job_s_cluster(in_a_ray_job, monkeypatch):
    monkeypatch.setenv("RAY_AUTH_MODE", "disabled")
    monkeypatch.setenv("RAY_ADDRESS", "10.0.0.7:6379")  # what Ray's job supervisor sets for the entrypoint
    assert join.resolve(None).address == "10.0.0.7:6379"


def test_inside_a_ray_job_a_relative_run_root_is_refused_naming_it(in_a_ray_job):
    with pytest.raises(config.ConfigError, match=re.escape("run_root='wavealign-runs' is relative, and inside a Ray "
                                                           "job it would resolve under the job's temporary")):
        join.check_run_root("wavealign-runs")
    join.check_run_root("/workspace/wavealign-runs")
