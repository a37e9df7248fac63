"""Issue 19, item 4 (API inputs): bad arguments are refused with a ValueError that names the argument, the value
received and what was expected, before any work, instead of being silently truncated or decoded wrongly."""

from __future__ import annotations

import dataclasses
import inspect
import re

import numpy as np
import pytest
import torch

from wavealign import blockmask, hardware, kernels, launch_order, masks, sim
from wavealign.kernels import ExecutionFacts, LaunchShape
from wavealign.launch_order import block_gather
from wavealign.masks import synthetic

BLOCK = 16
HEADS, BLOCKS, DIM = 2, 4, 16
TOKENS = BLOCKS * BLOCK


@pytest.fixture
def mask() -> torch.Tensor:
    return synthetic.random_mask(HEADS, BLOCKS, BLOCKS, 0.5, seed=0)


@pytest.fixture
def qkv() -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    gen = torch.Generator().manual_seed(0)
    return tuple(torch.randn(1, HEADS, TOKENS, DIM, generator=gen) for _ in range(3))


def _raises_naming(argument: str, call) -> ValueError:
    """Run ``call`` and check it raises a ValueError whose message starts with ``argument``."""
    with pytest.raises(ValueError, match=rf"^{re.escape(argument)} ") as err:
        call()
    return err.value


# row 9: attention backends take floating q/k/v of one dtype on one device

@pytest.mark.parametrize("name", ["q", "k", "v"])
def test_reference_backend_refuses_an_integer_tensor_naming_it(mask, qkv, name):
    tensors = dict(zip("qkv", qkv, strict=True))
    tensors[name] = torch.ones_like(tensors[name], dtype=torch.int64)
    err = _raises_naming(name, lambda: kernels.get("reference")(*tensors.values(), mask, block_size=BLOCK))
    assert "floating" in str(err) and "torch.int64" in str(err)


@pytest.mark.parametrize("backend", sorted(kernels.names()))
def test_every_backend_refuses_integer_qkv_before_planning(mask, backend):
    q, k, v = (torch.ones(1, HEADS, TOKENS, DIM, dtype=torch.int32) for _ in range(3))
    _raises_naming("q", lambda: kernels.get(backend)(q, k, v, mask, block_size=BLOCK))


def test_reference_attention_called_directly_refuses_integer_q(mask, qkv):
    from wavealign.kernels.reference import reference_attention

    q, k, v = qkv
    _raises_naming("q", lambda: reference_attention(q.long(), k, v, mask, block_size=BLOCK))


@pytest.mark.parametrize("name", ["q", "k"])
def test_launch_shape_of_refuses_an_integer_tensor(qkv, name):
    tensors = dict(zip("qk", qkv[:2], strict=True))
    tensors[name] = tensors[name].long()
    _raises_naming(name, lambda: LaunchShape.of(tensors["q"], tensors["k"], BLOCK))


def test_launch_shape_of_refuses_q_and_k_of_different_dtypes_naming_both(qkv):
    q, k, _ = qkv
    err = _raises_naming("q/k", lambda: LaunchShape.of(q, k.double(), BLOCK))
    assert "one dtype" in str(err) and "q torch.float32" in str(err) and "k torch.float64" in str(err)


def test_launch_shape_of_refuses_q_and_k_on_different_devices_naming_both(qkv):
    q, k, _ = qkv
    err = _raises_naming("q/k", lambda: LaunchShape.of(q, k.to("meta"), BLOCK))
    assert "one device" in str(err) and "q on cpu" in str(err) and "k on meta" in str(err)


def test_launch_shape_of_checks_v_with_q_and_k_when_given(qkv):
    q, k, v = qkv
    _raises_naming("q/k/v", lambda: LaunchShape.of(q, k, BLOCK, v=v.half()))


def test_planned_launch_refuses_a_v_of_another_dtype_at_run(mask, qkv):
    q, k, v = qkv
    launch = kernels.get("reference").plan(mask, None, LaunchShape.of(q, k, BLOCK))
    err = _raises_naming("q/k/v", lambda: launch.run(q, k, v.double()))
    assert "v torch.float64" in str(err)


def test_planned_launch_refuses_a_v_on_another_device_at_run(mask, qkv):
    q, k, v = qkv
    launch = kernels.get("reference").plan(mask, None, LaunchShape.of(q, k, BLOCK))
    err = _raises_naming("q/k/v", lambda: launch.run(q, k, v.to("meta")))
    assert "v on meta" in str(err)


def test_launch_shape_of_refuses_a_fractional_block_size(qkv):
    q, k, _ = qkv
    _raises_naming("block_size", lambda: LaunchShape.of(q, k, 16.0))


# row 10: RowOrder.from_perm takes only integer permutations

@pytest.mark.parametrize(("perm", "expected"), [
    (torch.zeros(4, 64), "integer dtype"),
    (torch.zeros(4, 64, dtype=torch.bool), "integer dtype"),
    (torch.zeros(4, 64, dtype=torch.long), "permutation of range"),
    (torch.tensor([[0, 1, 2, 4]]), "permutation of range"),
    (torch.tensor([[0, 1, 2, -1]]), "permutation of range"),
    (torch.arange(4), r"\(H, MB\) or \(B, H, MB\)"),
    ([[0, 1, 2, 3]], "integer tensor"),
])
def test_from_perm_refuses_what_is_not_a_permutation_per_row(perm, expected):
    err = _raises_naming("perm", lambda: launch_order.RowOrder.from_perm(perm, wave_size=4, stages="none"))
    assert re.search(expected, str(err))


def test_from_perm_refuses_a_fractional_wave_size():
    _raises_naming("wave_size", lambda: launch_order.RowOrder.from_perm(torch.arange(4).view(1, 4), 4.5, "none"))


def test_from_perm_accepts_a_batched_int32_permutation_and_inverts_it():
    perm = torch.stack([torch.randperm(6, generator=torch.Generator().manual_seed(s)) for s in range(6)])
    order = launch_order.RowOrder.from_perm(perm.view(2, 3, 6).int(), wave_size=2, stages="none")
    assert torch.equal(torch.gather(order.inverse, -1, order.perm), torch.arange(6).expand(2, 3, 6))


# row 11: integer arguments go through operator.index, with their ranges checked

@pytest.mark.parametrize(("kwargs", "argument"), [
    ({"wave_size": 1.5}, "wave_size"),
    ({"wave_size": 4.0}, "wave_size"),
    ({"wave_size": "abc"}, "wave_size"),
    ({"wave_size": "16"}, "wave_size"),
    ({"wave_size": True}, "wave_size"),
    ({"wave_size": 10**30}, "wave_size"),
    ({"wave_size": 0}, "wave_size"),
    ({"seed": 1.5}, "seed"),
    ({"seed": 2**64}, "seed"),
    ({"seed": -1}, "seed"),
    ({"iters": 1.5}, "iters"),
    ({"iters": 0}, "iters"),
    ({"rayleigh_ritz": "no"}, "rayleigh_ritz"),
])
def test_plan_refuses_a_bad_integer_argument_naming_it(mask, kwargs, argument):
    value = next(iter(kwargs.values()))
    err = _raises_naming(argument, lambda: launch_order.plan(mask, **kwargs))
    assert repr(value) in str(err) or str(value) in str(err)


def test_plan_states_the_range_of_wave_size():
    err = _raises_naming("wave_size", lambda: launch_order.plan(synthetic.random_mask(1, 4, 4, 0.5), wave_size=10**30))
    assert f"<= {2**31 - 1}" in str(err)


def test_plan_accepts_numpy_integers_as_the_same_order(mask):
    plain = launch_order.plan(mask, wave_size=2, seed=3, iters=5)
    numpy = launch_order.plan(mask, wave_size=np.int64(2), seed=np.int32(3), iters=np.int16(5))
    assert torch.equal(plain.perm, numpy.perm) and type(numpy.wave_size) is int


@pytest.mark.parametrize("call", [
    lambda q, order: launch_order.permute_rows(q, order, block_size=16.0),
    lambda q, order: launch_order.restore_rows(q, order, block_size=16.0),
    lambda q, order: block_gather.gather_blocks(q, order, block_size=16.0),
    lambda q, order: block_gather.scatter_blocks(q, order, block_size=16.0, seq_len=TOKENS),
], ids=["permute_rows", "restore_rows", "gather_blocks", "scatter_blocks"])
def test_row_moves_refuse_a_float_block_size(qkv, call):
    order = launch_order.RowOrder.identity(HEADS, BLOCKS)
    err = _raises_naming("block_size", lambda: call(qkv[0], order))
    assert "16.0" in str(err) and "integer" in str(err)


def test_scatter_blocks_refuses_a_float_seq_len(qkv):
    order = launch_order.RowOrder.identity(HEADS, BLOCKS)
    _raises_naming("seq_len", lambda: block_gather.scatter_blocks(qkv[0], order, BLOCK, seq_len=64.0))


def test_xattention_refuses_a_string_threshold_naming_the_range(qkv):
    err = _raises_naming("threshold", lambda: masks.build("xattention", *qkv, block_size=BLOCK, threshold="0.9"))
    assert "a number in (0.0, 1.0]" in str(err) and "'0.9'" in str(err)


@pytest.mark.parametrize(("method", "params", "argument"), [
    ("xattention", {"threshold": 0}, "threshold"),
    ("xattention", {"threshold": 1.5}, "threshold"),
    ("xattention", {"threshold": float("nan")}, "threshold"),
    ("xattention", {"threshold": True}, "threshold"),
    ("xattention", {"stride": 8.0}, "stride"),
    ("xattention", {"stride": 0}, "stride"),
    ("xattention", {"stride": 3}, "block_size"),
    ("xattention", {"keep_first_block": "no"}, "keep_first_block"),
    ("xattention", {"keep_diagonal": 1}, "keep_diagonal"),
    ("flexprefill", {"gamma": "0.6"}, "gamma"),
    ("flexprefill", {"tau": "0.1"}, "tau"),
    ("flexprefill", {"tau": 1.5}, "tau"),
    ("flexprefill", {"min_budget": 10.5}, "min_budget"),
    ("flexprefill", {"min_budget": -1}, "min_budget"),
    ("flexprefill", {"max_budget": "4096"}, "max_budget"),
    ("minference", {"budget": "0.5"}, "budget"),
    ("minference", {"top_k": 1.5}, "top_k"),
    ("minference", {"vertical_size": "1000"}, "vertical_size"),
    ("minference", {"last_q": 0}, "last_q"),
    ("minference", {"recall_target": "high"}, "recall_target"),
    ("minference", {"sample_blocks": 8.0}, "sample_blocks"),
    ("minference", {"search": "no"}, "search"),
    ("minference", {"layer": 1.5}, "layer"),
    ("minference", {"heads": [0, 1.5]}, "heads[1]"),
    ("spargeattn", {"simthreshd1": "0.6"}, "simthreshd1"),
    ("spargeattn", {"simthreshd1": 1.5}, "simthreshd1"),
    ("spargeattn", {"cdfthreshd": 2}, "cdfthreshd"),
    ("spargeattn", {"l1_bound": "0.06"}, "l1_bound"),
    ("spargeattn", {"sample_blocks": 2.5}, "sample_blocks"),
    ("spargeattn", {"autotune": "false"}, "autotune"),
    ("spargeattn", {"attention_sink": None}, "attention_sink"),
    ("random", {"density": "0.25"}, "density"),
    ("random", {"seed": 1.5}, "seed"),
    ("random", {"seed": 2**64}, "seed"),
    ("random-fixed-nnz", {"nnz_spread": 1.0}, "nnz_spread"),
    ("random-fixed-nnz", {"density": 0}, "density"),
    ("planted", {"noise": 0.5}, "noise"),
    ("planted", {"prototypes": 2.0}, "prototypes"),
    ("planted", {"shuffle": "yes"}, "shuffle"),
    ("planted", {"seed": -1}, "seed"),
])
def test_mask_method_refuses_a_bad_parameter_naming_it(qkv, method, params, argument):
    _raises_naming(argument, lambda: masks.build(method, *qkv, block_size=BLOCK, **params))


@pytest.mark.parametrize("method", ["random", "planted"])
def test_control_drawn_from_shape_refuses_a_string_density(method):
    _raises_naming("density", lambda: masks.get(method).for_shape(HEADS, BLOCKS, BLOCKS, density="0.25"))


def test_mask_methods_refuse_a_float_block_size(qkv):
    _raises_naming("block_size", lambda: masks.build("xattention", *qkv, block_size=16.0))


def test_mask_methods_accept_numpy_numbers_as_plain_ones(qkv):
    plain = masks.build("xattention", *qkv, block_size=BLOCK, threshold=0.5, stride=4)
    numpy = masks.build("xattention", *qkv, block_size=np.int64(BLOCK), threshold=np.float32(0.5),
                        stride=np.int64(4))
    assert torch.equal(plain, numpy)


@pytest.mark.parametrize(("method", "generator"), [("random", synthetic.random_mask),
                                                   ("random-fixed-nnz", synthetic.fixed_nnz_mask),
                                                   ("planted", synthetic.planted_mask)])
def test_checked_controls_keep_their_generators_signature_and_defaults(method, generator):
    assert inspect.signature(masks.get(method).from_shape) == inspect.signature(generator)


def test_seeded_controls_keep_the_masks_of_wavealign_synthetic():
    drawn = masks.get("planted").for_shape(HEADS, BLOCKS, 8, seed=3)
    assert torch.equal(drawn, synthetic.planted_mask(HEADS, BLOCKS, 8, 0.25, noise=0.02, seed=3))
    drawn = masks.get("random-fixed-nnz").for_shape(HEADS, BLOCKS, 8, seed=3)
    assert torch.equal(drawn, synthetic.fixed_nnz_mask(HEADS, BLOCKS, 8, 0.25, seed=3))


# row 12: the kv-index form takes integer tensors only

def _kv_form(mask: torch.Tensor, float_part: str) -> tuple[torch.Tensor, torch.Tensor]:
    kv_num, kv_idx = blockmask.to_kv_indices(mask)
    return (kv_num.float(), kv_idx) if float_part == "kv_num_blocks" else (kv_num, kv_idx.float())


@pytest.mark.parametrize("float_part", ["kv_num_blocks", "kv_indices"])
def test_from_kv_indices_refuses_a_float_tensor_naming_it(mask, float_part):
    err = _raises_naming(float_part, lambda: blockmask.from_kv_indices(*_kv_form(mask, float_part)))
    assert "integer dtype" in str(err) and "torch.float32" in str(err)


def test_from_kv_indices_refuses_a_float_num_kv_blocks(mask):
    _raises_naming("num_kv_blocks", lambda: blockmask.from_kv_indices(*blockmask.to_kv_indices(mask), 4.0))


@pytest.mark.parametrize("call", [
    lambda kv, order: blockmask.as_dense(kv),
    lambda kv, order: launch_order.plan(kv, wave_size=2),
    lambda kv, order: launch_order.permute_mask(kv, order),
    lambda kv, order: sim.simulate(kv, hardware="h100", backend="flex"),
    lambda kv, order: kernels.get("reference").plan(kv, None, LaunchShape(1, HEADS, TOKENS, TOKENS, DIM, BLOCK)),
], ids=["as_dense", "launch_order.plan", "permute_mask", "sim.simulate", "reference.plan"])
def test_every_kv_index_entry_point_refuses_float_kv_num_blocks(mask, call):
    kv = _kv_form(mask, "kv_num_blocks")
    _raises_naming("kv_num_blocks", lambda: call(kv, launch_order.RowOrder.identity(HEADS, BLOCKS)))


# row 13: mask methods refuse non-finite Q/K and tensors on different devices

@pytest.mark.parametrize("method", ["xattention", "flexprefill", "minference", "spargeattn"])
@pytest.mark.parametrize(("name", "bad"), [("q", float("nan")), ("k", float("inf")), ("k", float("-inf"))])
def test_qk_methods_refuse_non_finite_values_naming_the_tensor(qkv, method, name, bad):
    tensors = dict(zip("qkv", (t.clone() for t in qkv), strict=True))
    tensors[name][0, 1, 5, 3] = bad
    err = _raises_naming(name, lambda: masks.build(method, *tensors.values(), block_size=BLOCK))
    assert "finite" in str(err)


def test_controls_that_ignore_qk_do_not_read_their_values(qkv):
    q, k, v = qkv
    nan_q = torch.full_like(q, float("nan"))
    assert masks.build("random", nan_q, k, v, block_size=BLOCK).shape == (1, HEADS, BLOCKS, BLOCKS)


def test_mask_methods_refuse_q_and_k_on_different_devices(qkv):
    q, k, v = qkv
    err = _raises_naming("q, k, v", lambda: masks.build("xattention", q, k.to("meta"), v, block_size=BLOCK))
    assert "one device" in str(err) and "k on meta" in str(err)


# row 14: the simulator refuses a registered GPU its backend does not run on

def test_simulate_refuses_a_registered_gpu_the_backend_does_not_run_on(mask):
    with pytest.raises(ValueError, match=r"backend 'fa4' does not run on hardware 'a40'"):
        sim.simulate(mask, hardware="a40", backend="fa4", wave_size=84)


def test_simulate_refuses_the_pair_with_the_same_message_without_a_wave_size(mask):
    with pytest.raises(ValueError, match=r"backend 'fa4' does not run on hardware 'a40'.*runs on \['b200'"):
        sim.simulate(mask, hardware="a40", backend="fa4")


def test_simulate_runs_bare_execution_facts_on_any_registered_gpu(mask):
    facts = kernels.get("fa4").execution
    assert sim.simulate(mask, hardware="a40", backend=facts, wave_size=84).backend == "custom"


def test_simulate_runs_a_registered_backend_on_a_gpu_described_by_hand(mask):
    tiny = dataclasses.replace(hardware.get("h100"), name="tiny", sm_count=2)
    assert sim.simulate(mask, hardware=tiny, backend="fa4", wave_size=2).hardware == "tiny"


@pytest.mark.parametrize(("kwargs", "argument"), [
    ({"wave_size": 2.5}, "wave_size"),
    ({"head_dim": 128.0}, "head_dim"),
    ({"seed": 0.5}, "seed"),
])
def test_simulate_refuses_a_fractional_integer_argument(mask, kwargs, argument):
    _raises_naming(argument, lambda: sim.simulate(mask, hardware="h100", backend="flex", **kwargs))


def test_execution_facts_refuse_a_fractional_block_size():
    facts = ExecutionFacts(128, 128, mma_efficiency=0.5, block_overhead_s=0.0)
    _raises_naming("block_size", lambda: facts.with_block_size(64.5))


# issue 32, item 16: an order enters a launch only as a RowOrder over its blocks; sizes are integers, not truncated

@pytest.mark.parametrize("backend", ["reference", "sdpa", "flex"])
def test_a_tensor_that_is_no_permutation_is_no_launch_order_for_any_backend(backend, mask, qkv):
    q, k, _ = qkv
    zeros = torch.zeros(HEADS, BLOCKS, dtype=torch.long)  # ran block 0 in every slot, the other rows left zero
    _raises_naming("perm", lambda: kernels.get(backend).plan(mask, zeros, LaunchShape.of(q, k, block_size=BLOCK)))


def test_an_order_that_is_neither_a_row_order_nor_a_tensor_is_refused(mask, qkv):
    q, k, v = qkv
    with pytest.raises(ValueError,
                       match=r"^order must be a launch_order.RowOrder, its permutation tensor or None, got l"):
        kernels.get("reference")(q, k, v, mask, order=[[0, 1, 2, 3]] * HEADS, block_size=BLOCK)


def test_an_order_over_other_blocks_is_refused_before_the_launch(mask, qkv):
    q, k, v = qkv
    with pytest.raises(ValueError, match=r"^order covers \(H, MB\) = \(3, 4\); the launch has \(H, MB\) = \(2, 4\)"):
        kernels.get("reference")(q, k, v, mask, order=launch_order.RowOrder.identity(3, BLOCKS), block_size=BLOCK)


def test_a_permutation_with_an_index_out_of_range_is_refused():
    _raises_naming("perm", lambda: launch_order.RowOrder.from_perm(torch.tensor([[0, 1, 7]]), wave_size=4,
                                                                   stages="none"))


def test_from_perm_refuses_stages_it_does_not_know():
    _raises_naming("stages", lambda: launch_order.RowOrder.from_perm(torch.tensor([[1, 0]]), wave_size=4,
                                                                     stages="bogus"))


@pytest.mark.parametrize(("lead", "argument"), [((2,), "lead"), ((-1, 4), "lead[0]"), ((2, 0), "lead[1]"),
                                                ((2, 4.5), "lead[1]")])
def test_the_identity_order_needs_two_or_three_positive_sizes(lead, argument):
    _raises_naming(argument, lambda: launch_order.RowOrder.identity(*lead))


@pytest.mark.parametrize("wave_size", [3.9, True, "132"])
def test_skip_features_refuse_a_wave_size_that_is_not_an_integer(mask, wave_size):
    from wavealign import skip

    _raises_naming("wave_size", lambda: skip.features(mask, "h200", wave_size=wave_size))


def test_a_wave_larger_than_the_mask_is_one_wave_of_all_its_rows(mask):
    from wavealign.skip import mask_features

    assert (mask_features.wave_working_set_bytes(mask, launch_order.MAX_WAVE_SIZE)  # no padding to 2^31 rows
            == mask_features.wave_working_set_bytes(mask, BLOCKS))
