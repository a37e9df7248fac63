"""Credentials out of everything a sweep records or prints.

A tracking URI may carry a password (``http://alice:s3cret@host``) or a token in its query string
(``?token=...``). The sweep connects with the URI as given, but every copy of it that is written down (repro
commands, ``config.yaml``, the lock file, MLflow tags and artifacts, console lines, error messages) goes through
``redact``, which keeps the user name and replaces the secret with ``***``. MLflow's own variables
(``MLFLOW_TRACKING_USERNAME`` / ``MLFLOW_TRACKING_PASSWORD`` / ``MLFLOW_TRACKING_TOKEN``) keep credentials out of the
command line altogether.
"""

from __future__ import annotations

import re
from typing import Any

MASK = "***"
# scheme://user:password@ -> scheme://user:***@ (a user name alone is kept: it is not a secret). The user runs to
# the first ``:`` (it may hold an unencoded ``@``: alice@corp.com); the password, to the last ``@`` before the next
# blank: typed unencoded, it may hold ``@``, ``:``, ``/``, ``?``, ``#``, ``%`` and quotes (and a shell's or a
# serializer's quoting around them). Only the host follows the last ``@``, so a non-secret ``@`` later in the same
# word (``?mail=a@b``) hides a port and path too: too much hidden rather than a password shown
_USERINFO = re.compile(r"(?P<head>\b[A-Za-z][A-Za-z0-9+.-]*://[^/\s:'\"]*):(?P<secret>\S*)@")
# ?token=... / &password=... / ;api_key=... / #access_token=... in a URI's query, parameters or fragment
_QUERY = re.compile(r"(?P<head>[?&;#](?:[A-Za-z0-9_.-]*?)(?:token|password|passwd|pwd|secret|key|sig|signature|"
                    r"auth|credential|code)[A-Za-z0-9_.-]*=)(?P<secret>[^&;#\s'\"]+)", re.IGNORECASE)


def redact(text: str) -> str:
    """``text`` with every URI password and secret query value replaced by ``***``."""
    text = _USERINFO.sub(lambda m: f"{m['head']}:{MASK}@", text)
    return _QUERY.sub(lambda m: f"{m['head']}{MASK}", text)


def redact_tree(value: Any) -> Any:
    """A config container (dicts, lists, scalars) with ``redact`` applied to every string in it."""
    if isinstance(value, str):
        return redact(value)
    if isinstance(value, dict):
        return {key: redact_tree(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [redact_tree(item) for item in value]
    return value
