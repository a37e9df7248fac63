"""bench-kernels' CPU-side parts: backend specs from ``--backends`` and the kernel-only launch of a backend
that gathers Q and mask rows outside its kernel (checked here with the reference backend)."""

import argparse

import pytest
import torch

from jobs import bench_kernels
from jobs.bench_kernels import BackendSpec, Launches
from wavealign import block_gather, blockmask, kernels, reorder, synthetic


def test_a_backend_spec_carries_typed_options_and_is_labelled_as_written():
    spec = BackendSpec.parse("flashinfer:head_order=sequential")
    assert spec.name == "flashinfer" and dict(spec.options) == {"head_order": "sequential"}
    assert spec.label == "flashinfer:head_order=sequential"
    assert dict(BackendSpec.parse("flex:BLOCK_M=64").options) == {"BLOCK_M": 64}
    assert BackendSpec.parse("flex:x=true").label == "flex:x=true"  # as written, not re-rendered
    assert BackendSpec.parse("triton").label == "triton"


@pytest.mark.parametrize("text, message", [("fa5", "unknown backend 'fa5'"),
                                           ("flashinfer:head_order", "must be key=value"),
                                           ("flashinfer:=native", "must be key=value")])
def test_bad_backend_specs_are_refused_by_name(text, message):
    with pytest.raises(ValueError, match=message):
        BackendSpec.parse(text)


def test_the_backends_option_names_a_bad_backend_before_anything_runs(capsys):
    with pytest.raises(SystemExit):
        bench_kernels.parse_args(["--out", "x", "--backends", "flex,fa5"])
    assert "unknown backend 'fa5'" in capsys.readouterr().err


def test_the_backends_option_parses_every_spec():
    args = bench_kernels.parse_args(["--out", "x", "--backends", "fa4,flashinfer:head_order=sequential"])
    assert [b.label for b in args.backends] == ["fa4", "flashinfer:head_order=sequential"]
    assert isinstance(args, argparse.Namespace)


def test_options_reach_the_backend_call():
    spec = BackendSpec.parse("flashinfer:head_order=sideways")
    q = k = v = torch.zeros(1, 1, 4, 8)
    # flashinfer checks its head order before anything else, on any machine
    with pytest.raises(ValueError, match="head_order must be one of"):
        spec(q, k, v, torch.ones(1, 1, 1, dtype=torch.bool), block_size=4)


@pytest.mark.parametrize("n", [64, 61])  # whole blocks, and a ragged last block
def test_the_kernel_only_launch_computes_the_ordered_calls_rows_in_launch_order(n):
    torch.manual_seed(0)
    block, heads = 8, 3
    q, k, v = (torch.randn(1, heads, n, 16) for _ in range(3))
    blocks = -(-n // block)
    mask = synthetic.planted_mask(heads, blocks, blocks, 0.4, seed=2)
    launches = Launches(q, k, v, mask, block, wave_size=3, seed=0, stages=("none", "both"))
    spec = BackendSpec.parse("reference")
    assert not spec.backend.in_kernel_permutation
    order = launches.orders["both"]
    ordered = spec(q, k, v, mask, order=order, block_size=block)
    kernel_only = launches.call(spec, "both")()
    assert kernel_only.shape[2] == blocks * block  # Q was padded to whole blocks before the gather
    restored = block_gather.scatter_blocks(kernel_only, order, block, n)
    # the padded Q changes the reference's matmul shapes, so not bitwise: to float32 rounding
    torch.testing.assert_close(restored, ordered, rtol=1e-5, atol=1e-6)
    assert torch.equal(ordered, kernels.get("reference")(q, k, v, mask, block_size=block))
    # the original order runs as a plain call does
    assert torch.equal(launches.call(spec, "none")(), ordered)


def test_the_order_steps_are_the_gather_permutation_and_scatter_of_that_order():
    torch.manual_seed(1)
    q, k, v = (torch.randn(1, 2, 37, 8) for _ in range(3))
    mask = synthetic.random_mask(2, 5, 5, 0.5, seed=3)
    launches = Launches(q, k, v, mask, 8, wave_size=2, seed=0, stages=("none", "spatial"))
    order = launches.orders["spatial"]
    steps = launches.order_steps("spatial")
    assert sorted(steps) == ["gather_q", "permute_mask", "scatter_o"]
    gathered = steps["gather_q"]()
    assert torch.equal(gathered, block_gather.gather_blocks(q, order, 8))
    assert torch.equal(blockmask.as_dense(steps["permute_mask"]()), reorder.permute_mask(mask, order))
    assert steps["scatter_o"]().shape == q.shape
    qp, kvp = launches.gathered("spatial")
    assert torch.equal(qp, gathered) and torch.equal(kvp[1], steps["permute_mask"]()[1])
