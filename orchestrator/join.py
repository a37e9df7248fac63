"""Joining Ray: the cluster ``ray.address`` names, whether this driver can join it (checked before a sweep writes
anything), what the driver ships to the cluster's workers, and what the cluster it joined is (printed before any
cell is dispatched, kept in the run record and on the sweep's MLflow parent run).

``auto`` is resolved as ``ray.init`` resolves it (``RAY_ADDRESS``, then the address the latest ``ray start`` on
this machine left), without Ray's last resort of joining any Ray process it finds running here: on a shared host
that is another user's cluster, or another sweep's embedded Ray.

Token authentication (``RAY_AUTH_MODE=token``): the token is wherever Ray's own CLI reads it (``RAY_AUTH_TOKEN``,
the file ``RAY_AUTH_TOKEN_PATH`` names, ``~/.ray/auth_token``) and, as in ``ray.init``, ``auto`` turns token mode on
when a token is there, while an explicit address needs ``RAY_AUTH_MODE=token``. A refused token is one line within
a second, where Ray's own connect retries for 20 s and ends in a traceback.

Inside a Ray job (``ray job submit``, a KubeRay RayJob) the job's runtime_env already carries the code (its
``working_dir``), and ``ray.init`` refuses a runtime_env key given twice: the driver adds only what the job's lacks.

What Ray prints on the driver is kept off stdout, where the sweep's results go: the raylets' reports (a worker that
died, a task to be retried) go to stderr, and the embedded Ray is started with ``RAY_AUTH_MODE=token`` set (where
the user set no mode), Ray's own setting for the token authentication its ``ray.init`` turns on by default since
2.59 (https://docs.ray.io/en/latest/ray-security/token-auth.html), so that it does not warn on every run that it did.
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import ray
from ray._common.utils import get_ray_address_file
from ray._private import services
from ray._private.authentication.authentication_token_setup import (
    AUTH_MODE_ENV_VAR,
    _enable_token_auth,
    ensure_token_if_auth_enabled,
    maybe_enable_token_auth_if_token_available,
)
from ray._private.runtime_env.constants import RAY_JOB_CONFIG_JSON_ENV_VAR
from ray._private.utils import read_ray_address
from ray.exceptions import AuthenticationError
from ray.job_config import JobConfig

import wavealign
from orchestrator import cluster
from orchestrator.config_schema import ConfigError
from orchestrator.config_validate import RAY_ADDRESS
from orchestrator.run_root import DEFAULT_RUN_ROOT
from wavealign import user_config
from wavealign.registry import PLUGINS_ENV
from wavealign.skip.profile import PROFILE_DIR_ENV

EMBEDDED = "local"  # ray.init's address for a fresh embedded Ray, never a stale or foreign one found here
RAY_CLIENT_PORT = 10001  # Ray Client's default, for ray://host without a port
# what the workers of a cluster are not sent of the checkout (runtime_env working_dir; .gitignore'd files neither)
SHIP_EXCLUDES = (".git", ".venv", "benchmarks", "docs", "deploy", str(DEFAULT_RUN_ROOT), ".devsite", ".fa4",
                 ".vendor", ".devold", "*.egg-info", "**/__pycache__")
TOKEN_HELP = ("RAY_AUTH_MODE=token and the cluster's token in RAY_AUTH_TOKEN, in the file RAY_AUTH_TOKEN_PATH names, "
              "or in ~/.ray/auth_token (`ray get-auth-token` on the head prints it)")


class CannotJoin(ConnectionError):
    """``ray.address`` names no cluster this driver can join: none is running (``auto``), nothing answers there, it
    is not a Ray head, or it refuses this driver's token."""


@dataclass(frozen=True)
class Target:
    """The cluster a driver is to join: what ``ray.init`` is given, and how it was found (for the printed line)."""

    address: str  # EMBEDDED, a head's host:port, or Ray Client's ray://host[:port]
    found: str


def job_runtime_env() -> dict[str, Any] | None:
    """The runtime_env of the Ray job this driver runs as, or None outside one: Ray's job supervisor hands the job's
    config to the entrypoint in ``RAY_JOB_CONFIG_JSON_ENV_VAR``, and ``ray.init`` merges it with the driver's."""
    raw = os.environ.get(RAY_JOB_CONFIG_JSON_ENV_VAR)
    return None if raw is None else json.loads(raw).get("runtime_env") or {}


def resolve(address: str | None) -> Target:
    """The cluster ``address`` names: an embedded Ray for None (outside a Ray job; inside one, the job's cluster),
    the head given, or for ``auto`` the one ``RAY_ADDRESS`` or the latest ``ray start`` here names."""
    in_job = job_runtime_env() is not None
    if address is None and not in_job:
        return Target(EMBEDDED, "a local Ray started for this sweep")
    if address not in (None, "auto"):
        return Target(address, f"ray.address={address}")
    asked = "ray.address=auto" if address else "ray.address=null inside a Ray job"
    maybe_enable_token_auth_if_token_available(warn_if_disabled=False)  # what ray.init("auto") does
    from_env = os.environ.get("RAY_ADDRESS")
    if from_env:
        if from_env in ("auto", EMBEDDED) or not RAY_ADDRESS.fullmatch(from_env):
            raise CannotJoin(f"{asked}: RAY_ADDRESS={from_env!r}; expected a head's host:port or ray://host:port (an "
                             "http:// address is the dashboard's, for `ray job submit`)")
        return Target(from_env, f"{asked}, from RAY_ADDRESS" + (": this Ray job's cluster" if in_job else ""))
    left = get_ray_address_file(None)
    started = read_ray_address()
    if started:
        return Target(started, f"{asked}, the latest `ray start` on this machine ({left})")
    running = sorted(services.find_gcs_addresses())
    others = (f"; not joined: a Ray running here at {', '.join(running)} (another user's or sweep's, or one started "
              "with its own --temp-dir), which ray.address=HOST:PORT joins on purpose" if running else "")
    raise CannotJoin(f"{asked}: no Ray cluster to join (RAY_ADDRESS is unset and no `ray start` on this machine left "
                     f"{left}){others}; expected a running head (`ray start --head`) or ray.address=HOST:PORT")


def check_run_root(run_root: str | Path) -> None:
    """Inside a Ray job a relative ``run_root`` is a ``ConfigError``: it would resolve under the job's copy of its
    working_dir, which Ray deletes once the job is gone."""
    if job_runtime_env() is not None and not Path(run_root).is_absolute():
        raise ConfigError(f"run_root={str(run_root)!r} is relative, and inside a Ray job it would resolve under the "
                          f"job's temporary working directory ({Path.cwd()}), which Ray deletes; expected an absolute "
                          "path on the head, e.g. run_root=/workspace/wavealign-runs")


def check(address: str | None, timeout_s: float = 15.0) -> Target:
    """The cluster ``address`` names, once its head answers within ``timeout_s`` and takes this driver's token;
    else ``CannotJoin``."""
    target = resolve(address)
    if target.address == EMBEDDED:
        return target
    head = target.address.removeprefix("ray://")
    host, sep, port = head.rpartition(":") if not head.endswith("]") else (head, "", "")
    if not sep:
        host, port = head, str(RAY_CLIENT_PORT)
    host = host.strip("[]")
    try:
        socket.create_connection((host, int(port)), timeout=timeout_s).close()
    except OSError as exc:
        raise CannotJoin(f"{target.found}: nothing answers at {host}:{port} within {timeout_s:g} s "
                         f"({exc.strerror or exc}); is the head up (ray start --head) and the port open from this "
                         "machine?") from None
    if not target.address.startswith("ray://"):  # Ray Client's server checks the token itself, in ray.init
        _check_gcs(target, head, timeout_s)
    return target


def _check_gcs(target: Target, gcs: str, timeout_s: float) -> None:
    """``CannotJoin`` unless the GCS at ``gcs`` gives this driver its cluster id within ``timeout_s``: a refused
    token answers at once; a port that is not a GCS never does (Ray would wait 40 s per try)."""
    from ray._raylet import GcsClient

    try:
        ensure_token_if_auth_enabled(None, create_token_if_missing=False)  # what ray.init checks first
    except AuthenticationError:
        raise CannotJoin(f"{target.found}: RAY_AUTH_MODE=token but this machine has no Ray token; expected "
                         f"{TOKEN_HELP}") from None
    answer: dict[str, Any] = {}

    def ask() -> None:
        try:
            answer["cluster_id"] = GcsClient(address=gcs).cluster_id
        except Exception as exc:
            answer["error"] = exc

    with _stderr_silenced():  # Ray's C++ client logs the refusal too: the sweep says it once
        asking = threading.Thread(target=ask, name="wavealign-gcs-check", daemon=True)
        asking.start()
        asking.join(timeout_s)
    if isinstance(answer.get("error"), AuthenticationError):
        mode = os.environ.get(AUTH_MODE_ENV_VAR) or "unset"
        raise CannotJoin(f"{target.found}: the cluster refused this driver's Ray token (RAY_AUTH_MODE={mode}); "
                         f"expected {TOKEN_HELP}")
    if "cluster_id" not in answer:
        why = answer.get("error") or f"no answer within {timeout_s:g} s"
        raise CannotJoin(f"{target.found}: {gcs} is not a Ray head's GCS ({why}); expected the port `ray start "
                         "--head --port` took (6379 by default), not the dashboard's (8265) or Ray Client's (10001: "
                         "ray://HOST:10001)")


@contextmanager
def _stderr_silenced() -> Iterator[None]:
    saved = os.dup(2)
    try:
        with open(os.devnull, "w") as null:
            os.dup2(null.fileno(), 2)
        yield
    finally:
        os.dup2(saved, 2)
        os.close(saved)


# what a worker must see as the driver does: the plugin modules the sweep names (``wavealign.registry`` imports them
# on every worker) and where the user's installed profiles and generators are (``wavealign.user_config``,
# ``skip.PROFILE_DIR_ENV``): a path a cluster's nodes reach only through a shared file system
FORWARDED_ENV = (PLUGINS_ENV, user_config.HOME_ENV, PROFILE_DIR_ENV)


def shipped_runtime_env(job_env: dict[str, Any] | None) -> dict[str, Any]:
    """What the driver gives a cluster's workers (``ray.init``'s runtime_env): the user's import path and
    ``FORWARDED_ENV``, and this checkout as the
    ``working_dir`` (its packages and conf/; results, caches and bundles stay home), first on their import path.
    Code installed from a wheel is not shipped: the nodes run the same wheel (the image's).

    Inside a Ray job (``job_env``, its runtime_env) only what the job's lacks: not the working_dir when the job
    has one (it is this code), nor the driver's PYTHONPATH (Ray's, into the head's copy of that working_dir)."""
    names = FORWARDED_ENV if job_env is not None else ("PYTHONPATH", *FORWARDED_ENV)
    job_env = job_env or {}
    env_vars = {k: os.environ[k] for k in names if os.environ.get(k) and k not in job_env.get("env_vars", {})}
    runtime_env: dict[str, Any] = {"env_vars": env_vars}
    if wavealign.CHECKOUT and "working_dir" not in job_env:
        runtime_env |= {"working_dir": str(wavealign.CHECKOUT), "excludes": list(SHIP_EXCLUDES)}
    return runtime_env


def connect(address: str | None, num_cpus: int | None = None, num_gpus: int | None = None,
            object_store_mb: int | None = None, job_name: str | None = None) -> Target | None:
    """Join the cluster ``address`` names (``resolve``), or start an embedded local Ray; the target joined, None if
    this process had joined one already. ``job_name`` names this driver's Ray job (the dashboard's Jobs "Name": its
    metadata's ``job_name``; a job from ``ray job submit`` keeps the one it was submitted with)."""
    if ray.is_initialized():
        return None
    _raylet_reports_to_stderr()
    target = resolve(address)
    job_config = JobConfig(metadata={"job_name": job_name} if job_name else {})
    if target.address != EMBEDDED:
        try:
            ray.init(address=target.address, runtime_env=shipped_runtime_env(job_runtime_env()), log_to_driver=False,
                     logging_level="WARNING", job_config=job_config)
        except AuthenticationError:  # Ray Client's refusal (a head's GCS is checked before: ``check``)
            raise CannotJoin(f"{target.found}: the cluster refused this driver's Ray token; expected "
                             f"{TOKEN_HELP}") from None
        return target
    # this machine's own workers import the checkout in place (or the installed wheel): nothing to ship
    env_vars = {k: os.environ[k] for k in ("PYTHONPATH", *FORWARDED_ENV) if os.environ.get(k)}
    if wavealign.CHECKOUT:
        env_vars["PYTHONPATH"] = os.pathsep.join(filter(None, [str(wavealign.CHECKOUT), env_vars.get("PYTHONPATH")]))
    if AUTH_MODE_ENV_VAR not in os.environ:  # the user's mode wins; else Ray 2.59+'s default, without its warning
        _enable_token_auth()  # Ray's own step: RAY_AUTH_MODE=token, and this process's Ray config told so
    try:
        ray.init(address=EMBEDDED, num_cpus=num_cpus, num_gpus=num_gpus, runtime_env={"env_vars": env_vars},
                 include_dashboard=False, object_store_memory=object_store_mb * 2**20 if object_store_mb else None,
                 log_to_driver=False, logging_level="WARNING", job_config=job_config)
    except Exception as exc:  # Ray's own start-up failing (its raylet not up within 30 s under load; a bad temp dir)
        with contextlib.suppress(Exception):
            ray.shutdown()  # whatever of it did start
        raise RayDidNotStart(f"the embedded Ray did not start: {_first_line(exc)} (load {os.getloadavg()[0]:.1f} on "
                             f"{os.cpu_count()} CPUs; Ray gives its raylet 30 s); expected a machine with room for "
                             "it: retry when it is less busy, or start one with `ray start --head` and pass "
                             "ray.address=auto") from None
    return target


class RayDidNotStart(CannotJoin):
    """The embedded Ray this driver starts failed to start: said in one line, not Ray's traceback."""


def _first_line(exc: Exception) -> str:
    text = str(exc).strip()
    return f"{type(exc).__name__}: {text.splitlines()[0]}" if text else type(exc).__name__


def _raylet_reports_to_stderr() -> None:
    """Ray's driver prints its raylets' reports (a worker that died, a task to be retried: ``(raylet) ...``) to stdout,
    marked not an error (``ray._private.worker.listen_error_messages``), even with ``log_to_driver=False``: they
    explain a failure, so they go to stderr, where the sweep's own reasons go. Installed once, before ``ray.init``
    starts the thread that prints them."""
    from ray._private import worker

    printer = worker.print_to_stdstream
    if getattr(printer, "raylet_reports_to_stderr", False):
        return

    def print_raylet_reports_to_stderr(data: dict[str, Any], ignore_prefix: bool) -> None:
        printer({**data, "is_err": True} if data.get("pid") == "raylet" else data, ignore_prefix)

    print_raylet_reports_to_stderr.raylet_reports_to_stderr = True  # type: ignore[attr-defined]
    worker.print_to_stdstream = print_raylet_reports_to_stderr


@dataclass(frozen=True)
class JoinedCluster:
    """The Ray cluster a sweep ran on, at the time it joined: its GCS address, how it was found, and its alive
    nodes, GPUs by accelerator type (``cluster.LABEL_KEYS``) and CPUs."""

    address: str
    found: str
    nodes: int
    gpus_by_type: dict[str, int]
    untyped_gpus: int
    cpus: int

    def __str__(self) -> str:
        gpus = ", ".join(f"{kind} x{count}" for kind, count in sorted(self.gpus_by_type.items()))
        if self.untyped_gpus:
            gpus = ", ".join(filter(None, [gpus, f"{self.untyped_gpus} unlabelled"]))
        return (f"cluster {self.address} ({self.found}): {self.nodes} node{'s' * (self.nodes != 1)}, "
                f"GPUs {gpus or 'none'}, {self.cpus} CPUs")


def joined(target: Target | None) -> JoinedCluster:
    """The cluster this process is connected to; ``target`` None: one the caller had joined already."""
    inv = cluster.inventory()
    return JoinedCluster(address=ray.get_runtime_context().gcs_address,
                         found=target.found if target else "joined before the sweep started", nodes=inv.nodes,
                         gpus_by_type=inv.gpus_by_type, untyped_gpus=inv.untyped_gpus, cpus=inv.cpus)
