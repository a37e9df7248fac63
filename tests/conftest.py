"""Shared test setup: ``@pytest.mark.gpu`` tests are skipped on machines without CUDA."""

import importlib.util

import pytest
import torch

from wavealign import user_config

if importlib.util.find_spec("ray") is not None:
    # Ray's log handler writes to the sys.stderr of Ray's first import: import it here, where that is pytest's
    # session-long stream, not inside a test whose capsys stream is closed when it ends (a later test's Ray warning
    # then prints a "Logging error" traceback into that test's output)
    import ray  # noqa: F401


@pytest.fixture(autouse=True, scope="session")
def _user_config_home(tmp_path_factory):
    """Every test (and every process it starts) reads and installs the user's files in a folder of its session,
    never the real ``~/.config/wavealign``."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv(user_config.HOME_ENV, str(tmp_path_factory.mktemp("wavealign-home")))
        yield


def pytest_collection_modifyitems(config, items):
    if torch.cuda.is_available():
        return
    skip_gpu = pytest.mark.skip(reason="needs a CUDA GPU")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip_gpu)
