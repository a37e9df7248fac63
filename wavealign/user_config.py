"""The user's configuration directory: where commands install what they fit, read before the packaged defaults.

``wavealign refresh-profiles`` installs skip profiles in ``profiles/`` and ``python lab/calibrate_workload.py
--install`` a fitted workload generator in ``workloads/``; the library reads a file there before the packaged one of
the same name (``wavealign/profiles/``, ``wavealign/workloads/``), which stays a read-only default: no command writes
into the installed package.

The folder is ``$WAVEALIGN_HOME``, else ``$XDG_CONFIG_HOME/wavealign``, else ``~/.config/wavealign`` (the XDG Base
Directory specification's default for ``$XDG_CONFIG_HOME``). Each function reads the environment when called, so a
process (or a test) that sets ``WAVEALIGN_HOME`` is served from there at once.
"""

from __future__ import annotations

import os
from pathlib import Path

HOME_ENV = "WAVEALIGN_HOME"


def home() -> Path:
    """The user's wavealign folder (it need not exist yet: the commands that install create it)."""
    if os.environ.get(HOME_ENV):
        return Path(os.environ[HOME_ENV]).expanduser()
    # the XDG specification ignores an unset, empty or relative $XDG_CONFIG_HOME
    xdg = os.environ.get("XDG_CONFIG_HOME", "")
    base = Path(xdg) if os.path.isabs(xdg) else Path.home() / ".config"
    return base / "wavealign"


def profiles_dir() -> Path:
    """Where the user's skip profiles are (``<hardware>.yaml``): ``refresh-profiles`` installs them here."""
    return home() / "profiles"


def workloads_dir() -> Path:
    """Where the user's fitted workload generators are (``scene.yaml``, ``calibrated.yaml``):
    ``lab/calibrate_workload.py --install`` writes them here."""
    return home() / "workloads"
