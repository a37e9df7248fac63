"""``benchmarks/results/orders-h200/bands.py``'s head-by-head build: the mask a 23 GiB host can build of a family that
needs the model's Q/K at 363,600 tokens x 40 heads is, for VSA, the mask the sweep builds of all heads at once."""

import torch
from results_script import load

from wavealign import inputs, workloads
from wavealign.records import InputSpec


def test_vsa_built_head_by_head_is_the_all_heads_mask(monkeypatch):
    wl = workloads.preset("wan2.1-1.3b", 5, "480p")  # latent (2, 30, 52): 3,120 tokens, 25 blocks of 128
    spec = InputSpec(workload="tiny", method="vsa", seq_len_tokens=wl.seq_len, num_heads=3, head_dim=wl.head_dim,
                     model=wl.model, resolution="480p", frames=5, heads=[2, 5, 7],
                     generator=workloads.DEFAULT_GENERATOR)
    whole, _ = inputs.build(inputs.InputRequest(spec, 128, torch.device("cpu"), with_qkv=False))
    assert torch.equal(load("orders-h200/bands.py", monkeypatch).head_by_head(spec, 128), whole)
