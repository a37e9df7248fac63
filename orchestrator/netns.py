"""``ray.private_network=true``: run the sweep's driver, and so the embedded Ray it starts, in a network namespace
of its own (Linux).

Ray 2.60 gives no setting that keeps an embedded cluster's servers off the machine's interfaces: its GCS, raylet
and worker gRPC servers listen on every interface, its dashboard agent on 0.0.0.0 (docs/reliability.md). In a
private network namespace they can listen where they like: the namespace has only its own loopback, so nothing
outside the sweep's own processes reaches them. ``wavealign sweep`` restarts itself there (``enter``): with
``unshare --user --map-root-user --net`` (an unprivileged user namespace, so no root is needed; the files it
writes are the user's own), this module brings the namespace's loopback up, then runs the same command again.
The sweep then reaches no network either: MLflow must be a local store (the default sqlite one), and Ray the
embedded one.
"""

from __future__ import annotations

import fcntl
import os
import shutil
import socket
import struct
import subprocess
import sys
import urllib.parse
from typing import NoReturn

INSIDE_ENV = "WAVEALIGN_PRIVATE_NETWORK"  # set in the restarted driver: it is inside the namespace
_UNSHARE = ("--user", "--map-root-user", "--net")
_SIOCGIFFLAGS, _SIOCSIFFLAGS, _IFF_UP = 0x8913, 0x8914, 0x1  # linux/sockios.h, linux/if.h


def inside() -> bool:
    return os.environ.get(INSIDE_ENV) == "1"


def unavailable(tracking_uri: str | None, ray_address: str | None) -> str | None:
    """Why this sweep cannot run in a private network namespace, or None if it can."""
    if ray_address not in (None, "local"):
        return f"ray.address={ray_address!r} is a cluster, reached over the network; it is for the embedded Ray"
    scheme = urllib.parse.urlparse(tracking_uri or "").scheme.split("+")[0]
    if scheme not in ("", "file", "sqlite"):
        return f"the MLflow store ({scheme}://...) is reached over the network; expected a local one (sqlite, a path)"
    if not sys.platform.startswith("linux") or shutil.which("unshare") is None:
        return "it needs Linux's unshare (util-linux)"
    probe = subprocess.run(["unshare", *_UNSHARE, "true"], capture_output=True, text=True)
    if probe.returncode != 0:
        return f"this system refuses unprivileged user namespaces (unshare: {probe.stderr.strip() or probe.returncode})"
    return None


def enter(command: list[str]) -> NoReturn:
    """Replace this process by ``command`` (``wavealign sweep ...``'s arguments after ``sweep``) run again inside a
    private network namespace; the process id stays the same, so signals reach it as before."""
    os.execvp("unshare", ["unshare", *_UNSHARE, "--", sys.executable, "-m", __name__, *command])


def loopback_up() -> None:
    """Bring the namespace's loopback interface up (a new namespace's is down), as ``ip link set lo up`` does."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        request = struct.pack("16sH", b"lo", 0)
        flags = struct.unpack("16sH", fcntl.ioctl(sock, _SIOCGIFFLAGS, request)[:18])[1]
        fcntl.ioctl(sock, _SIOCSIFFLAGS, struct.pack("16sH", b"lo", flags | _IFF_UP))


if __name__ == "__main__":
    loopback_up()
    os.environ[INSIDE_ENV] = "1"
    os.execv(sys.executable, [sys.executable, "-m", "jobs.cli", "sweep", *sys.argv[1:]])
