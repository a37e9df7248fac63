"""``benchmarks/results/orders-h200/bands.py``'s head-by-head build: the mask a 23 GiB host can build of a family that
needs the model's Q/K at 363,600 tokens x 40 heads is, for VSA, the mask the sweep builds of all heads at once."""

import importlib.util
import sys
from pathlib import Path

import torch

from wavealign import inputs, workloads
from wavealign.records import InputSpec

BANDS = Path(__file__).resolve().parents[1] / "benchmarks" / "results" / "orders-h200" / "bands.py"


def _bands(monkeypatch):
    spec = importlib.util.spec_from_file_location("results_bands", BANDS)
    module = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(sys.modules, "results_bands", module)
    spec.loader.exec_module(module)
    return module


def _spec(method: str) -> InputSpec:
    wl = workloads.preset("wan2.1-1.3b", 5, "480p")  # latent (2, 30, 52): 3,120 tokens, 25 blocks of 128
    return InputSpec(workload="tiny", method=method, seq_len_tokens=wl.seq_len, num_heads=3, head_dim=wl.head_dim,
                     model=wl.model, resolution="480p", frames=5, heads=[2, 5, 7],
                     generator=workloads.DEFAULT_GENERATOR)


def test_vsa_built_head_by_head_is_the_all_heads_mask(monkeypatch):
    spec = _spec("vsa")
    whole, _ = inputs.build(inputs.InputRequest(spec, 128, torch.device("cpu"), with_qkv=False))
    assert torch.equal(_bands(monkeypatch).head_by_head(spec, 128), whole)

