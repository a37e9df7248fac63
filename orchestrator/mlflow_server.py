"""An MLflow tracking server that does not answer, said in seconds.

MLflow's client retries a request it cannot send seven times with a doubling backoff, each try waiting up to 120 s
(``mlflow.utils.rest_utils.http_request``, reading ``MLFLOW_HTTP_REQUEST_MAX_RETRIES`` and
``MLFLOW_HTTP_REQUEST_TIMEOUT`` at each request): an address where nothing listens took 329 s and ended in a
traceback. Every process that imports the orchestrator's MLflow code gets bounded retries (one retry, 10 s a try)
unless the user set MLflow's variables, and ``sqlite_store.prepare``, which every store goes through before MLflow
opens it, first tries a TCP connection to the server (``unanswered``), so that nothing listening is one line.
"""

from __future__ import annotations

import os
import socket
import urllib.request

# a sweep, report or sync goes on without MLflow (Parquet holds the rows): fail fast rather than retry for minutes
os.environ.setdefault("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "1")
os.environ.setdefault("MLFLOW_HTTP_REQUEST_TIMEOUT", "10")
PROBE_TIMEOUT_S = 5.0
_DEFAULT_PORTS = {"http": 80, "https": 443}


def unanswered(tracking_uri: str, timeout_s: float = PROBE_TIMEOUT_S) -> str | None:
    """Why nothing answers at the HTTP(S) server of ``tracking_uri`` (``connection refused``, ``timed out``, a host
    that does not resolve), or None when a TCP connection opens, for other URIs, and where a proxy would carry
    MLflow's requests (a direct connection says nothing then). The host and port are read as MLflow's HTTP client
    reads them (``urllib3.util.parse_url``)."""
    from urllib3.util import parse_url

    try:
        url = parse_url(tracking_uri)
    except ValueError as exc:
        return f"not an address: {exc}"
    if url.scheme not in _DEFAULT_PORTS or not url.host:
        return None
    if url.scheme in urllib.request.getproxies() and not urllib.request.proxy_bypass(url.host):
        return None
    try:
        socket.create_connection((url.host, url.port or _DEFAULT_PORTS[url.scheme]), timeout=timeout_s).close()
    except TimeoutError:
        return f"no answer within {timeout_s:g} s"
    except OSError as exc:
        return (exc.strerror or str(exc) or type(exc).__name__).lower()
    return None
