"""Shared test setup: ``@pytest.mark.gpu`` tests are skipped on machines without CUDA."""

import pytest
import torch


def pytest_collection_modifyitems(config, items):
    if torch.cuda.is_available():
        return
    skip_gpu = pytest.mark.skip(reason="needs a CUDA GPU")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip_gpu)


@pytest.fixture(autouse=True)
def _fresh_pipeline_inputs():
    """Each test builds its own inputs: the pipeline keeps the latest group's mask and Q/K/V (and a
    prefetched set) for the next group."""
    from wavealign import pipeline

    pipeline.forget_inputs()
    yield
    pipeline.forget_inputs()
